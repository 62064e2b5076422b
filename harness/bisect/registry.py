"""Candidates from a registry: the distribution API's tag list (`GET /v2/<repo>/tags/list`, paginated by its `Link`
header), filtered by a glob, each tag ordered by its image's creation time (the config blob's `created`, through the
manifest; an index's first linux/amd64 manifest, else its first). Anonymous bearer tokens are asked for as the
registry's `WWW-Authenticate` says (Docker Hub, GHCR for public images). `registry:HOST/REPO[:GLOB]`; `http://HOST`
for a plain-HTTP registry (a local one). Every answer is bounded; a tag whose creation time cannot be read is one line
naming it, never left out."""

from __future__ import annotations

import fnmatch
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC

from harness.errors import UsageError

#: At most this many tags are ordered (each costs two or three requests).
MAX_TAGS = 500
#: At most this many bytes of one answer.
MAX_BODY = 4 << 20
TIMEOUT_S = 30
MANIFESTS = ", ".join((
    "application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json"))

#: (url, headers) → (status, headers, body); injectable for tests.
Fetch = Callable[[str, dict[str, str]], tuple[int, dict[str, str], bytes]]


def http_fetch(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # a URL of the user's registry
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read(MAX_BODY + 1)
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read(MAX_BODY + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise UsageError(f"registry: {url}: {getattr(exc, 'reason', exc)}") from None


def split(spec: str) -> tuple[str, str, str, str]:
    """`HOST/REPO[:GLOB]` → (base URL, repo, the reference's prefix `HOST/REPO`, glob)."""
    scheme = "https"
    m = re.match(r"^(https?)://", spec)
    if m:
        scheme, spec = m.group(1), spec[m.end():]
    path, glob = spec, "*"
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        name, glob = last.split(":", 1)
        path = path[:len(path) - len(last)] + name
    first, _, rest = path.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, repo = first, rest
    else:  # Docker Hub, as docker names it
        host, repo = "docker.io", path
    if not host or not repo:
        raise UsageError(f"registry:{spec}: write registry:HOST/REPO[:GLOB] (e.g. registry:ghcr.io/org/fork:v1.*)")
    prefix = f"{host}/{repo}"
    api_host = "registry-1.docker.io" if host in ("docker.io", "index.docker.io") else host
    if api_host == "registry-1.docker.io" and "/" not in repo:
        repo = "library/" + repo
    return f"{scheme}://{api_host}", repo, prefix, glob or "*"


class _Client:
    def __init__(self, base: str, fetch: Fetch):
        self.base, self.fetch = base, fetch
        self.token: str | None = None

    def get(self, path: str, accept: str = "application/json") -> tuple[dict[str, str], bytes]:
        url = path if path.startswith("http") else self.base + path
        headers = {"Accept": accept, **({"Authorization": f"Bearer {self.token}"} if self.token else {})}
        status, got, body = self.fetch(url, headers)
        if status == 401 and self.token is None and "bearer" in got.get("www-authenticate", "").lower():
            self.token = self._token(got["www-authenticate"])
            return self.get(path, accept)
        if status != 200:
            raise UsageError(f"registry: {url}: HTTP {status}"
                             + (" (the registry does not list tags)" if status == 404 and "tags" in url else ""))
        if len(body) > MAX_BODY:
            raise UsageError(f"registry: {url}: an answer over {MAX_BODY:,} bytes")
        return got, body

    def _token(self, challenge: str) -> str:
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            raise UsageError(f"registry: {self.base}: asks for a token without saying where")
        status, _, body = self.fetch(realm + "?" + urllib.parse.urlencode(params), {})
        if status != 200:
            raise UsageError(f"registry: {realm}: no anonymous token (HTTP {status}); a private registry's tags "
                             "can be listed in a file instead")
        doc = _json(body, realm)
        token = doc.get("token") or doc.get("access_token") if isinstance(doc, dict) else None
        if not token:
            raise UsageError(f"registry: {realm}: the answer holds no token")
        return token

    def json(self, path: str, accept: str = "application/json") -> tuple[dict[str, str], dict]:
        headers, body = self.get(path, accept)
        doc = _json(body, self.base + path)
        if not isinstance(doc, dict):
            raise UsageError(f"registry: {self.base + path}: not a JSON object")
        return headers, doc


def _json(body: bytes, where: str):
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise UsageError(f"registry: {where}: not JSON") from None


def list_tags(client: _Client, repo: str) -> list[str]:
    tags: list[str] = []
    path: str | None = f"/v2/{repo}/tags/list?n=1000"
    pages = 0
    while path and pages < 100:
        headers, doc = client.json(path)
        tags += [t for t in doc.get("tags") or [] if isinstance(t, str)]
        m = re.search(r"<([^>]+)>\s*;\s*rel=\"?next\"?", headers.get("link", ""))
        path, pages = (m.group(1) if m else None), pages + 1
    return tags


def created(client: _Client, repo: str, tag: str) -> str:
    """The tag's image creation time (RFC 3339, as its config says)."""
    _, doc = client.json(f"/v2/{repo}/manifests/{tag}", MANIFESTS)
    if "manifests" in doc:  # an index: the linux/amd64 image, else the first
        items = [m for m in doc["manifests"] if isinstance(m, dict)]
        pick = next((m for m in items if (m.get("platform") or {}).get("os") == "linux"
                     and (m.get("platform") or {}).get("architecture") == "amd64"), items[0] if items else None)
        if pick is None or "digest" not in pick:
            raise UsageError(f"registry: {repo}:{tag}: an index without manifests")
        _, doc = client.json(f"/v2/{repo}/manifests/{pick['digest']}", MANIFESTS)
    digest = (doc.get("config") or {}).get("digest")
    if not digest:
        raise UsageError(f"registry: {repo}:{tag}: its manifest names no config")
    _, config = client.json(f"/v2/{repo}/blobs/{digest}")
    when = config.get("created")
    if not isinstance(when, str) or not when:
        raise UsageError(f"registry: {repo}:{tag}: its image config has no creation time (list the candidates in "
                         "a file instead)")
    return when


def tags_by_creation(spec: str, fetch: Fetch = http_fetch) -> dict[str, str]:
    """`HOST/REPO[:GLOB]` → {`HOST/REPO:TAG`: created}, oldest first (ties by tag)."""
    base, repo, prefix, glob = split(spec)
    client = _Client(base, fetch)
    tags = [t for t in list_tags(client, repo) if fnmatch.fnmatchcase(t, glob)]
    if not tags:
        raise UsageError(f"registry:{spec}: no tag matches {glob!r}")
    if len(tags) > MAX_TAGS:
        raise UsageError(f"registry:{spec}: {len(tags):,} tags match {glob!r}; at most {MAX_TAGS} (narrow the glob)")
    when = {t: created(client, repo, t) for t in tags}
    return {f"{prefix}:{t}": when[t] for t in sorted(tags, key=lambda t: (_instant(when[t]), t))}


def _instant(text: str) -> str:
    """An RFC 3339 time, comparable as text: UTC, fraction cut (Go writes `2024-05-01T10:00:00.123456789Z`)."""
    from datetime import datetime

    t = re.sub(r"(\.\d{1,6})\d*", r"\1", text.replace("Z", "+00:00"))
    try:
        return datetime.fromisoformat(t).astimezone(UTC).isoformat()
    except ValueError:
        raise UsageError(f"registry: creation time {text!r} is no RFC 3339 time") from None
