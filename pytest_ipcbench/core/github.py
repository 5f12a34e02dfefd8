"""The few GitHub REST calls that keep one comment per pull request up to date (urllib only).

``upsert_comment`` lists the pull request's issue comments (every page), updates (PATCH) the
first one whose body starts with the marker, or creates one: never a second. ``pull_head`` reads
the pull request's head commit, so that a ``workflow_run`` job posts only for the commit it
measured (the pull request number comes from an artifact a fork could have written).
Every failure is a :class:`GitHubError` (exit 2) that says what to check.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from .errors import IpcbenchError, UsageError

API_URL = "https://api.github.com"
TIMEOUT = 30.0
_REPO = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_HINTS = {
    401: "the token was refused: is it set and still valid?",
    403: "the token may not do this: a comment needs `pull-requests: write` (post from a workflow_run "
         "workflow: a pull_request workflow of a fork gets a read-only token)",
    404: "no such repository or pull request, or the token cannot see it",
}


class GitHubError(IpcbenchError):
    """A GitHub API call failed; the message names the call and what to check."""


@dataclass(frozen=True)
class Posted:
    action: str  # "created", "updated" or "unchanged"
    id: int
    url: str


def check_target(repo: str, number: int, api_url: str) -> None:
    if not _REPO.fullmatch(repo):
        raise UsageError(f"--repo {repo!r}: expected OWNER/NAME")
    if number < 1:
        raise UsageError(f"--pr {number}: expected a pull request number (1 or more)")
    if not api_url.startswith(("https://", "http://")):
        raise UsageError(f"--api-url {api_url!r}: expected an http(s) URL")


class Client:
    def __init__(self, token: str, api_url: str = API_URL, timeout: float = TIMEOUT) -> None:
        self.token, self.api, self.timeout = token, api_url.rstrip("/"), timeout

    def call(self, method: str, url: str, body: dict[str, Any] | None = None) -> tuple[Any, str | None]:
        """(the decoded JSON answer, the URL of the next page or None)."""
        if not url.startswith(("http://", "https://")):
            url = self.api + url
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Accept": "application/vnd.github+json", "Authorization": f"Bearer {self.token}",
            "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "pytest-ipcbench",
            **({"Content-Type": "application/json"} if data is not None else {})})
        what = f"{method} {url}"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode("utf-8", "replace")
                link = resp.headers.get("Link")
        except urllib.error.HTTPError as exc:
            detail = _message(exc)
            hint = _HINTS.get(exc.code, "")
            raise GitHubError(
                f"{what}: HTTP {exc.code} {exc.reason}{': ' + detail if detail else ''}{'; ' + hint if hint else ''}"
            ) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise GitHubError(
                f"{what}: cannot reach the GitHub API ({reason}); check --api-url and the network"
            ) from None
        try:
            return (json.loads(text) if text.strip() else None), _next(link)
        except ValueError:
            raise GitHubError(f"{what}: the answer is not JSON: {text[:120]!r}") from None


def _message(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read().decode("utf-8", "replace")).get("message", ""))[:200]
    except (ValueError, AttributeError, OSError):
        return ""


def _next(link: str | None) -> str | None:
    """The ``rel="next"`` URL of a Link header (GitHub's pagination)."""
    for part in (link or "").split(","):
        m = re.match(r'\s*<([^>]+)>\s*;.*\brel="?next"?', part)
        if m:
            return m.group(1)
    return None


def find_comment(client: Client, repo: str, number: int, marker: str) -> dict[str, Any] | None:
    """The first comment of the pull request whose body starts with ``marker`` (all pages read)."""
    url: str | None = f"/repos/{repo}/issues/{number}/comments?per_page=100"
    while url:
        page, url = client.call("GET", url)
        if not isinstance(page, list):
            raise GitHubError(f"GET comments of {repo}#{number}: expected a list, got {type(page).__name__}")
        for comment in page:
            if isinstance(comment, dict) and str(comment.get("body") or "").startswith(marker):
                return comment
    return None


def upsert_comment(client: Client, repo: str, number: int, body: str, marker: str) -> Posted:
    """Create the pull request's one comment that starts with ``marker``, or update it."""
    if not body.startswith(marker):
        body = marker + "\n" + body
    found = find_comment(client, repo, number, marker)
    if found is None:
        made, _ = client.call("POST", f"/repos/{repo}/issues/{number}/comments", {"body": body})
        return Posted("created", int(made["id"]), str(made.get("html_url", "")))
    if found.get("body") == body:
        return Posted("unchanged", int(found["id"]), str(found.get("html_url", "")))
    made, _ = client.call("PATCH", f"/repos/{repo}/issues/comments/{int(found['id'])}", {"body": body})
    return Posted("updated", int(made["id"]), str(made.get("html_url", "")))


def pull_head(client: Client, repo: str, number: int) -> str:
    """The commit at the head of the pull request now."""
    pull, _ = client.call("GET", f"/repos/{repo}/pulls/{number}")
    try:
        return str(pull["head"]["sha"])
    except (TypeError, KeyError):
        raise GitHubError(f"GET {repo} pull request #{number}: no head commit in the answer") from None
