"""The Kubernetes manifests' variables expanded as the Job's shell sees them."""

from __future__ import annotations


def kube_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet makes of a container's command and args: `$(VAR)` of the container's env replaced, `$$` made
    `$`, anything else left as written (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2:end]
                    out.append(env[name] if name in env else f"$({name})")
                    i = end + 1
                    continue
                out.append("$(")
                i += 2
                continue
            out.append("$" + nxt)
            i += 2
            continue
        out.append(text[i])
        i += 1
    return "".join(out)
