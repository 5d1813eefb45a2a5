#!/bin/sh
# shellcheck shell=sh
# nccl_env.sh - NCCL variables for the RDMA interfaces of this pod (rdma-cni).
#
# Usage:   . nccl_env.sh          # exports the variables (returns non-zero on error,
#                                 # the calling shell survives)
#          eval "$(sh nccl_env.sh)"   # prints "export K=V" lines (exit 1 on error)
#
# POSIX sh (dash, bash, busybox ash); reads only sysfs and /proc/net, needs no ip
# and no python (only `sort`). `rdma-cni nccl-env` (rdma_cni/tools/nccl_env.py, also
# used by `rdma-cni verify`) is the same algorithm in Python: tests/unit/
# test_nccl_env_differential.py runs both on generated GID tables and requires the
# same output. The algorithm:
#  1. The pod's IPv4 addresses: "/32 host LOCAL" entries of /proc/net/fib_trie.
#  2. Scan every GID slot of /sys/class/infiniband/*/ports/*: keep type "RoCE v2"
#     with a GID ::ffff:a.b.c.d; a slot whose attributes fail to read (EINVAL:
#     empty) is skipped; link-local and RoCE v1 GIDs are never used.
#  3. Pod RDMA interfaces: netdevs of /sys/class/net except lo and the socket
#     interface that have a route in /proc/net/route or own a RoCE v2 GID whose
#     address is local (other pods' GIDs carry the same ndev names, never a
#     local address). Each must own such a GID, else error. Several addresses:
#     the lowest. Without a readable fib_trie the GID's own address is used and
#     an interface with GIDs of several addresses is an error.
#     NCCL_ENV_IFACES="eth1 eth2" pins the interface list (comma or white space
#     separated; no name in it: discovered as above).
#  4. NCCL_IB_HCA="=ibdev:port,..." (exact match) in natural interface order;
#     equal GID indices -> NCCL_IB_GID_INDEX; differing -> NCCL_IB_ADDR_RANGE =
#     the smallest CIDR covering the pod GIDs, only if no other RoCE v2 IPv4 GID
#     on those HCA ports is inside it (every wider range contains it), else
#     error. NCCL_SOCKET_IFNAME = $NCCL_ENV_SOCKET_IFNAME (default eth0).
#  5. Executed, a value that is not plain ([A-Za-z0-9_@%+=:,./-]) is single-quoted
#     for sh, so eval never runs part of a device name.
# Names are the kernel's: any but '/', ':' and white space (dot names included).
# Environment: NCCL_ENV_SYSFS_ROOT (default /: prefix of sys/ and proc/, for
# tests), NCCL_ENV_SOCKET_IFNAME, NCCL_ENV_IFACES, NCCL_ENV_SOURCED=0|1 (force the
# sourced/executed detection; by default bash uses BASH_SOURCE, other shells
# treat a $0 named nccl_env.sh / nccl-env as executed).

_ne_err() {
    printf 'nccl_env.sh: %s\n' "$*" >&2
    return 1
}

# _ne_rd FILE: first line of FILE in _ne_v; fails when unreadable or empty.
_ne_rd() {
    _ne_v=
    [ -f "$1" ] || return 1
    { read -r _ne_v <"$1"; } 2>/dev/null
    [ -n "$_ne_v" ]
}

# _ne_ip4 GID: kernel-formatted ::ffff:a.b.c.d GID -> _ne_n (integer), _ne_ip.
_ne_ip4() {
    case $1 in
    0000:0000:0000:0000:0000:ffff:????:????) ;;
    *) return 1 ;;
    esac
    _ne_h=${1#0000:0000:0000:0000:0000:ffff:}
    case $_ne_h in *[!0-9a-fA-F:]*) return 1 ;; esac
    _ne_n=$(((0x${_ne_h%%:*} << 16) | 0x${_ne_h#*:}))
    _ne_ip="$((_ne_n >> 24)).$(((_ne_n >> 16) & 255)).$(((_ne_n >> 8) & 255)).$((_ne_n & 255))"
}

# Records "ibdev port index ndev ipint ip" of every RoCE v2 IPv4 GID, in _ne_gids.
_ne_scan() {
    _ne_gids=
    for _ne_pp in "$_ne_root"/sys/class/infiniband/*/ports/* \
        "$_ne_root"/sys/class/infiniband/.[!.]*/ports/* \
        "$_ne_root"/sys/class/infiniband/..?*/ports/*; do
        _ne_port=${_ne_pp##*/}
        case $_ne_port in '' | *[!0-9]*) continue ;; esac
        _ne_ib=${_ne_pp%/ports/*}
        _ne_ib=${_ne_ib##*/}
        for _ne_tp in "$_ne_pp"/gid_attrs/types/*; do
            _ne_i=${_ne_tp##*/}
            case $_ne_i in '' | *[!0-9]*) continue ;; esac
            _ne_rd "$_ne_tp" && [ "$_ne_v" = "RoCE v2" ] || continue
            _ne_rd "$_ne_pp/gids/$_ne_i" && _ne_ip4 "$_ne_v" || continue
            _ne_rd "$_ne_pp/gid_attrs/ndevs/$_ne_i" || _ne_v=/
            _ne_gids="$_ne_gids$_ne_ib $_ne_port $_ne_i $_ne_v $_ne_n $_ne_ip
"
        done
    done
}

# Local IPv4 addresses in _ne_locals (" a b "), _ne_haslocal=1 when fib_trie is readable.
_ne_local() {
    _ne_locals=' '
    _ne_haslocal=0
    _ne_f=$_ne_root/proc/net/fib_trie
    [ -f "$_ne_f" ] && [ -r "$_ne_f" ] || return 0
    _ne_haslocal=1
    _ne_last=
    while read -r _ne_a _ne_b _ne_c _ne_d; do
        case $_ne_a in
        '|--') _ne_last=$_ne_b ;;
        /32)
            if [ "$_ne_b $_ne_c" = "host LOCAL" ] && [ -n "$_ne_last" ]; then
                _ne_locals="$_ne_locals$_ne_last "
            fi
            ;;
        esac
    done <"$_ne_f"
}

_ne_islocal() {
    [ "$_ne_haslocal" = 0 ] && return 0
    case $_ne_locals in *" $1 "*) return 0 ;; esac
    return 1
}

# Netdev names of this netns except lo and the socket interface, in _ne_names.
_ne_netdevs() {
    _ne_names=' '
    for _ne_p in "$_ne_root"/sys/class/net/* "$_ne_root"/sys/class/net/.[!.]* \
        "$_ne_root"/sys/class/net/..?*; do
        [ -e "$_ne_p" ] || [ -L "$_ne_p" ] || continue
        _ne_a=${_ne_p##*/}
        [ "$_ne_a" = lo ] || [ "$_ne_a" = "$_ne_sock" ] || _ne_names="$_ne_names$_ne_a "
    done
}

_ne_isname() {
    case $_ne_names in *" $1 "*) return 0 ;; esac
    return 1
}

# Candidate interfaces, naturally sorted, in _ne_cands (newline separated).
_ne_candidates() {
    _ne_list=
    case $- in *f*) _ne_a=1 ;; *) _ne_a= ;; esac
    set -f
    IFS="$(printf ', \t\r\v\f')
"
    set -- ${NCCL_ENV_IFACES:-}
    IFS=' 	
'
    [ -n "$_ne_a" ] || set +f
    _ne_b=
    for _ne_a in "$@"; do
        [ -n "$_ne_a" ] || continue
        _ne_isname "$_ne_a" || { _ne_b="$_ne_b, $_ne_a" && continue; }
        _ne_list="$_ne_list$_ne_a
"
    done
    [ -z "$_ne_b" ] || _ne_err "failed to find pod interface(s) ${_ne_b#, }: not present" || return 1
    if [ -z "$_ne_list" ]; then
        _ne_f=$_ne_root/proc/net/route
        if [ -f "$_ne_f" ]; then
            while read -r _ne_a _ne_b; do
                [ "$_ne_a" != Iface ] && _ne_isname "$_ne_a" && _ne_list="$_ne_list$_ne_a
"
            done <"$_ne_f"
        fi
        while read -r _ne_a _ne_b _ne_c _ne_d _ne_e _ne_f; do
            [ -n "$_ne_d" ] && _ne_isname "$_ne_d" && _ne_islocal "$_ne_f" && _ne_list="$_ne_list$_ne_d
"
        done <<EOF
$_ne_gids
EOF
    fi
    _ne_tab=$(printf '\t')
    _ne_cands=$(printf '%s' "$_ne_list" | while read -r _ne_a; do
        [ -n "$_ne_a" ] || continue
        _ne_b=${_ne_a##*[!0-9]}
        printf 'n%s\t%s\t%s\n' "${_ne_a%"$_ne_b"}" "${_ne_b:--1}" "$_ne_a"
    done | LC_ALL=C sort -u -t "$_ne_tab" -k1,1 -k2,2n -k3,3)
}

# _ne_addr IFNAME: the address of a pod interface in _ne_sel (integer).
_ne_addr() {
    _ne_sel=
    _ne_cnt=0
    while read -r _ne_a _ne_b _ne_c _ne_d _ne_e _ne_f; do
        [ "$_ne_d" = "$1" ] && _ne_islocal "$_ne_f" || continue
        [ -n "$_ne_sel" ] && [ "$_ne_sel" = "$_ne_e" ] && continue
        _ne_cnt=$((_ne_cnt + 1))
        if [ -z "$_ne_sel" ] || [ "$_ne_e" -lt "$_ne_sel" ]; then _ne_sel=$_ne_e; fi
    done <<EOF
$_ne_gids
EOF
    [ -n "$_ne_sel" ] || _ne_err "failed to find the RoCE v2 GID of pod interface $1: no GID ::ffff:<ip> owned by it matches an IPv4 address of this pod" || return 1
    if [ "$_ne_haslocal" = 0 ] && [ "$_ne_cnt" -gt 1 ]; then
        _ne_err "failed to pick the address of pod interface $1: /proc/net/fib_trie is unreadable and GIDs name several"
        return 1
    fi
}

# _ne_pick IFNAME IPINT: append its one GID to _ne_chosen ("ib port idx ipint").
_ne_pick() {
    _ne_m=
    _ne_cnt=0
    while read -r _ne_a _ne_b _ne_c _ne_d _ne_e _ne_f; do
        [ "$_ne_d" = "$1" ] && [ "$_ne_e" = "$2" ] || continue
        _ne_cnt=$((_ne_cnt + 1))
        _ne_m="$_ne_a $_ne_b $_ne_c $_ne_e"
    done <<EOF
$_ne_gids
EOF
    [ "$_ne_cnt" -gt 0 ] || _ne_err "failed to find a RoCE v2 GID owned by pod interface $1 on any RDMA device" || return 1
    [ "$_ne_cnt" -eq 1 ] || _ne_err "failed to pick the GID of pod interface $1: its address is on several HCAs" || return 1
    _ne_chosen="$_ne_chosen$_ne_m
"
}

# NCCL_IB_ADDR_RANGE from _ne_chosen, or an error, in _ne_range.
_ne_range() {
    _ne_first=
    _ne_prefix=32
    while [ "$_ne_prefix" -gt 0 ]; do
        _ne_s=$((32 - _ne_prefix))
        _ne_ok=1
        while read -r _ne_a _ne_b _ne_c _ne_e; do
            [ -n "$_ne_e" ] || continue
            [ -n "$_ne_first" ] || _ne_first=$_ne_e
            [ $((_ne_e >> _ne_s)) -eq $((_ne_first >> _ne_s)) ] || _ne_ok=0
        done <<EOF
$_ne_chosen
EOF
        [ "$_ne_ok" = 1 ] && break
        _ne_prefix=$((_ne_prefix - 1))
    done
    _ne_s=$((32 - _ne_prefix))
    _ne_net=$(((_ne_first >> _ne_s) << _ne_s))
    while read -r _ne_a _ne_b _ne_c _ne_d _ne_e _ne_f; do
        [ -n "$_ne_e" ] || continue
        case $_ne_hcas in *",$_ne_a:$_ne_b,"*) ;; *) continue ;; esac
        case "
$_ne_chosen" in *"
$_ne_a $_ne_b $_ne_c "*) continue ;; esac
        [ $((_ne_e >> _ne_s)) -eq $((_ne_net >> _ne_s)) ] || continue
        _ne_err "failed to choose NCCL_IB_ADDR_RANGE: GID indices differ and the smallest range covering the pod GIDs also matches $_ne_f ($_ne_a:$_ne_b index $_ne_c, ndev $_ne_d)"
        return 1
    done <<EOF
$_ne_gids
EOF
    _ne_range="$((_ne_net >> 24)).$(((_ne_net >> 16) & 255)).$(((_ne_net >> 8) & 255)).$((_ne_net & 255))/$_ne_prefix"
}

_ne_compute() {
    _ne_scan
    _ne_local
    _ne_netdevs
    _ne_candidates || return 1
    [ -n "$_ne_cands" ] || _ne_err "failed to find RDMA interfaces in the pod: none besides lo and $_ne_sock" || return 1
    _ne_chosen=
    _ne_hcas=,
    _ne_idx=
    _ne_same=1
    while IFS="$_ne_tab" read -r _ne_x _ne_y _ne_if; do
        _ne_addr "$_ne_if" && _ne_pick "$_ne_if" "$_ne_sel" || return 1
        set -- $_ne_m
        case $_ne_hcas in *",$1:$2,"*) ;; *) _ne_hcas="$_ne_hcas$1:$2," ;; esac
        [ -z "$_ne_idx" ] || [ "$_ne_idx" = "$3" ] || _ne_same=0
        _ne_idx=$3
    done <<EOF
$_ne_cands
EOF
    _ne_hca=${_ne_hcas#,}
    _ne_hca="=${_ne_hca%,}"
    if [ "$_ne_same" = 1 ]; then
        _ne_out="NCCL_IB_HCA=$_ne_hca
NCCL_IB_GID_INDEX=$_ne_idx"
    else
        _ne_range || return 1
        _ne_out="NCCL_IB_HCA=$_ne_hca
NCCL_IB_ADDR_RANGE=$_ne_range"
    fi
    _ne_out="$_ne_out
NCCL_SOCKET_IFNAME=$_ne_sock"
}

# _ne_q VALUE: VALUE in _ne_v, quoted for sh when it needs it (as Python's shlex.quote).
_ne_q() {
    case $1 in
    '') _ne_v="''" ;;
    *[!ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-]*)
        _ne_v=\' _ne_r=$1
        while :; do
            case $_ne_r in
            *\'*)
                _ne_v="$_ne_v${_ne_r%%\'*}'\"'\"'"
                _ne_r=${_ne_r#*\'}
                ;;
            *)
                _ne_v="$_ne_v$_ne_r'"
                break
                ;;
            esac
        done
        ;;
    *) _ne_v=$1 ;;
    esac
}

# _ne_main MODE: MODE=export exports into this shell, MODE=print prints lines.
_ne_main() {
    _ne_root=${NCCL_ENV_SYSFS_ROOT:-}
    _ne_root=${_ne_root%/}
    _ne_sock=${NCCL_ENV_SOCKET_IFNAME:-eth0}
    _ne_ifs=$IFS
    IFS=' 	
'
    _ne_fg=  # bash's failglob would abort the scan at a pattern matching nothing
    if [ -n "${BASH_VERSION:-}" ] && shopt -q failglob; then
        _ne_fg=1
        shopt -u failglob
    fi
    _ne_compute
    _ne_rc=$?
    [ -z "$_ne_fg" ] || shopt -s failglob
    IFS=$_ne_ifs
    [ "$_ne_rc" = 0 ] || return 1
    while read -r _ne_a; do
        if [ "$1" = print ]; then
            _ne_q "${_ne_a#*=}"
            printf 'export %s=%s\n' "${_ne_a%%=*}" "$_ne_v"
        else
            case $_ne_a in
            NCCL_IB_GID_INDEX=*) unset NCCL_IB_ADDR_RANGE ;;
            NCCL_IB_ADDR_RANGE=*) unset NCCL_IB_GID_INDEX ;;
            esac
            export "$_ne_a"
        fi
    done <<EOF
$_ne_out
EOF
}

_ne_cleanup() {
    unset _ne_v _ne_h _ne_n _ne_ip _ne_gids _ne_pp _ne_port _ne_ib _ne_tp _ne_i _ne_locals \
        _ne_haslocal _ne_f _ne_last _ne_a _ne_b _ne_c _ne_d _ne_e _ne_names _ne_p _ne_list \
        _ne_tab _ne_cands _ne_sel _ne_cnt _ne_m _ne_chosen _ne_first _ne_prefix _ne_s _ne_ok \
        _ne_net _ne_range _ne_hcas _ne_idx _ne_same _ne_x _ne_y _ne_if _ne_hca _ne_out \
        _ne_root _ne_sock _ne_ifs _ne_sourced _ne_r _ne_fg
    unset -f _ne_err _ne_rd _ne_ip4 _ne_scan _ne_local _ne_islocal _ne_netdevs _ne_isname \
        _ne_candidates _ne_addr _ne_pick _ne_range _ne_compute _ne_q _ne_main _ne_cleanup
}

_ne_sourced=0
if [ -n "${BASH_VERSION:-}" ]; then
    eval '[ "${BASH_SOURCE[0]}" != "$0" ]' && _ne_sourced=1
elif [ -n "${ZSH_EVAL_CONTEXT:-}" ]; then
    case $ZSH_EVAL_CONTEXT in *:file*) _ne_sourced=1 ;; esac
else
    case ${0##*/} in nccl_env.sh | nccl_env | nccl-env | nccl-env.sh) ;; *) _ne_sourced=1 ;; esac
fi
case ${NCCL_ENV_SOURCED:-} in 0 | 1) _ne_sourced=$NCCL_ENV_SOURCED ;; esac

if [ "$_ne_sourced" = 1 ]; then
    _ne_main export
    _ne_rc=$?
    _ne_cleanup
    eval "unset _ne_rc; return $_ne_rc"
fi
_ne_main print || exit 1
