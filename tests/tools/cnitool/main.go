// cnitool, as upstream's cnitool/cnitool.go (containernetworking/cni v1.1.x) behaves,
// built against Debian's libcni (golang-github-appc-cni-dev), which does not ship the
// tool itself. Same environment (NETCONFPATH, CNI_PATH, CNI_ARGS, CAP_ARGS,
// CNI_IFNAME), same container ID (cnitool- + sha512 of the netns path), same libcni
// calls (AddNetworkList, CheckNetworkList, DelNetworkList). One addition for tests:
// CNI_CACHE_DIR moves libcni's result cache off the host's /var/lib/cni.
package main

import (
	"context"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

func parseArgs(args string) ([][2]string, error) {
	var result [][2]string
	for _, pair := range strings.Split(args, ";") {
		kv := strings.Split(pair, "=")
		if len(kv) != 2 || kv[0] == "" || kv[1] == "" {
			return nil, fmt.Errorf("invalid CNI_ARGS pair %q", pair)
		}
		result = append(result, [2]string{kv[0], kv[1]})
	}
	return result, nil
}

func exit(err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintf(os.Stderr, "%s: Add, check, or remove network interfaces from a network namespace\n"+
			"  %s add   <net> <netns>\n  %s check <net> <netns>\n  %s del   <net> <netns>\n",
			os.Args[0], os.Args[0], os.Args[0], os.Args[0])
		os.Exit(1)
	}
	netdir := os.Getenv("NETCONFPATH")
	if netdir == "" {
		netdir = "/etc/cni/net.d"
	}
	netconf, err := libcni.LoadConfList(netdir, os.Args[2])
	if err != nil {
		exit(err)
	}
	var capabilityArgs map[string]interface{}
	if v := os.Getenv("CAP_ARGS"); len(v) > 0 {
		if err = json.Unmarshal([]byte(v), &capabilityArgs); err != nil {
			exit(err)
		}
	}
	var cniArgs [][2]string
	if v := os.Getenv("CNI_ARGS"); len(v) > 0 {
		if cniArgs, err = parseArgs(v); err != nil {
			exit(err)
		}
	}
	ifName, ok := os.LookupEnv("CNI_IFNAME")
	if !ok {
		ifName = "eth0"
	}
	netns, err := filepath.Abs(os.Args[3])
	if err != nil {
		exit(err)
	}
	s := sha512.Sum512([]byte(netns))
	containerID := fmt.Sprintf("cnitool-%x", s[:10])
	paths := filepath.SplitList(os.Getenv("CNI_PATH"))
	cninet := libcni.NewCNIConfig(paths, nil)
	if dir := os.Getenv("CNI_CACHE_DIR"); dir != "" {
		cninet = libcni.NewCNIConfigWithCacheDir(paths, dir, nil)
	}
	rt := &libcni.RuntimeConf{ContainerID: containerID, NetNS: netns, IfName: ifName,
		Args: cniArgs, CapabilityArgs: capabilityArgs}
	switch os.Args[1] {
	case "add":
		result, err := cninet.AddNetworkList(context.TODO(), netconf, rt)
		if result != nil {
			_ = result.Print()
		}
		exit(err)
	case "check":
		exit(cninet.CheckNetworkList(context.TODO(), netconf, rt))
	case "del":
		exit(cninet.DelNetworkList(context.TODO(), netconf, rt))
	}
	exit(fmt.Errorf("unknown command %q", os.Args[1]))
}
