"""Which generation of a pod the PodResources answer belongs to (pure).

PodResources v1 names pods by namespace/name only: for a moment after a pod is
deleted and recreated under the same name, the kubelet may list both, or answer
``Get`` with the old one. ADD knows the new pod's UID (``K8S_POD_UID``) and the
kubelet's device checkpoint is keyed by UID, so:

- when the checkpoint gives this UID devices of the resource, those are the
  pod's (a PodResources candidate with the same IDs is taken as such; if none
  matches, the checkpoint wins: PodResources is showing another generation);
- when the checkpoint exists, holds nothing for this UID, and gives the
  PodResources devices to another UID, the answer is another pod's: refused
  with "try again later" (11) rather than guessed;
- two candidates with different devices and no checkpoint to tell them apart:
  refused the same way.
"""

from __future__ import annotations

from rdma_cni.errors import TryAgain


def pick_generation(pod_ref: str, candidates: list[list[str]], own: list[str] | None,
                    owners: dict[str, list[str]]) -> list[str]:
    """The device IDs that belong to this pod generation.

    ``candidates``: the ID lists of every PodResources entry named ``pod_ref``;
    ``own``: the checkpoint's IDs for this pod's UID (None: no checkpoint, or no UID);
    ``owners``: the checkpoint's UID -> IDs for the resource (other pods included).
    """
    if own:
        for ids in candidates:
            if sorted(ids) == sorted(own):
                return ids
        return list(own)
    distinct = {tuple(sorted(c)) for c in candidates}
    if len(distinct) > 1:
        raise TryAgain(f"failed to tell which devices belong to pod {pod_ref}: the kubelet "
                       "lists two pods of that name (an earlier one still terminating)")
    ids = candidates[0] if candidates else []
    if own is not None and ids:
        taken = {uid for uid, theirs in owners.items() if set(theirs) & set(ids)}
        if taken:
            raise TryAgain(f"failed to allocate RDMA devices to pod {pod_ref}: the kubelet "
                           f"lists {', '.join(sorted(ids))} for that name, but its checkpoint "
                           f"gives them to pod UID {', '.join(sorted(taken))} (an earlier pod "
                           "of the same name)")
    return ids
