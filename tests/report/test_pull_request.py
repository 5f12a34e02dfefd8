"""``ipcbench comment``: the pull request's one comment, rendered from a verdicts file and posted
to a local HTTP server that answers GitHub's few REST calls (GitHub is not reachable here); the
requests it receives are what is checked: created once, then updated, never a second comment."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from pytest_ipcbench.commands import main
from pytest_ipcbench.core.group import in_mpi_job
from pytest_ipcbench.report.pull_request import MARKER, MAX_ROWS, load_verdicts, render

pytestmark = pytest.mark.skipif(in_mpi_job(), reason="a local HTTP server per test: not inside an MPI job")
DATA = Path(__file__).resolve().parents[1] / "data" / "verdicts"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "pull-requests.md"
REPO, PR, TOKEN, HEAD = "acct/proj", 7, "t0ken", "a" * 40


class FakeGitHub(ThreadingHTTPServer):
    """Issue comments of one pull request, paginated 100 a page as GitHub does."""

    def __init__(self, status: int | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.status = status  # answer every call with this error status
        self.comments: list[dict[str, Any]] = []
        self.requests: list[tuple[str, str, Any]] = []
        self.auth: list[str] = []
        self.head = HEAD

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def add(self, body: str, login: str = "someone") -> dict[str, Any]:
        c = {"id": 1000 + len(self.comments), "body": body, "user": {"login": login},
             "html_url": f"https://github.invalid/{REPO}/pull/{PR}#c{1000 + len(self.comments)}"}
        self.comments.append(c)
        return c


class _Handler(BaseHTTPRequestHandler):
    server: FakeGitHub

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _handle(self, method: str) -> None:
        srv = self.server
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        url = urlparse(self.path)
        srv.requests.append((method, url.path + (f"?{url.query}" if url.query else ""), body))
        srv.auth.append(self.headers.get("Authorization", ""))
        if srv.status:
            return self._send(srv.status, {"message": "Bad credentials" if srv.status == 401 else "Not Found"})
        comments = f"/repos/{REPO}/issues/{PR}/comments"
        if method == "GET" and url.path == comments:
            q = parse_qs(url.query)
            per, page = int(q.get("per_page", ["30"])[0]), int(q.get("page", ["1"])[0])
            chunk = srv.comments[(page - 1) * per:page * per]
            more = page * per < len(srv.comments)
            link = {"Link": f'<{srv.url}{comments}?per_page={per}&page={page + 1}>; rel="next", '
                            f'<{srv.url}{comments}?per_page={per}&page=99>; rel="last"'} if more else {}
            return self._send(200, chunk, link)
        if method == "POST" and url.path == comments:
            return self._send(201, srv.add(body["body"], "github-actions[bot]"))
        if method == "PATCH" and url.path.startswith(f"/repos/{REPO}/issues/comments/"):
            cid = int(url.path.rsplit("/", 1)[1])
            for c in srv.comments:
                if c["id"] == cid:
                    c["body"] = body["body"]
                    return self._send(200, c)
        if method == "GET" and url.path == f"/repos/{REPO}/pulls/{PR}":
            return self._send(200, {"number": PR, "head": {"sha": srv.head}})
        self._send(404, {"message": "Not Found"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")


def _serve(status: int | None = None) -> Iterator[FakeGitHub]:
    srv = FakeGitHub(status)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


@pytest.fixture
def github() -> Iterator[FakeGitHub]:
    yield from _serve()


def _comment(api: str, verdicts: Path, *extra: str) -> int:
    return main(["comment", "--json", str(verdicts), "--repo", REPO, "--pr", str(PR), "--api-url", api, *extra])


def _marked(srv: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in srv.comments if c["body"].startswith(MARKER)]


def test_created_once_then_updated_never_a_second(github: FakeGitHub, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    for i in range(130):  # the pull request's own discussion: two pages before ours
        github.add(f"comment {i}")
    github.add(f"> {MARKER} quoted by a person, not at the start")  # not ours
    assert _comment(github.url, DATA / "inconclusive.json", "--run-url", "https://ci.invalid/run/1") == 0
    posts = [r for r in github.requests if r[0] in ("POST", "PATCH")]
    assert [(m, p) for m, p, _ in posts] == [("POST", f"/repos/{REPO}/issues/{PR}/comments")]
    # every page was read before deciding to create
    assert [p for m, p, _ in github.requests if m == "GET"] == [
        f"/repos/{REPO}/issues/{PR}/comments?per_page=100", f"/repos/{REPO}/issues/{PR}/comments?per_page=100&page=2"]
    assert set(github.auth) == {f"Bearer {TOKEN}"}
    (ours,) = _marked(github)
    assert "INCONCLUSIVE" in ours["body"] and "https://ci.invalid/run/1" in ours["body"]
    assert "created comment" in capsys.readouterr().out

    github.requests.clear()
    assert _comment(github.url, DATA / "regression.json") == 0  # the next push: the same comment, updated
    writes = [(m, p) for m, p, _ in github.requests if m in ("POST", "PATCH")]
    assert writes == [("PATCH", f"/repos/{REPO}/issues/comments/{ours['id']}")]
    assert len(_marked(github)) == 1 and "REGRESSION" in _marked(github)[0]["body"]
    assert "updated comment" in capsys.readouterr().out

    github.requests.clear()
    assert _comment(github.url, DATA / "regression.json") == 0  # nothing changed: nothing written
    assert [m for m, _, _ in github.requests] == ["GET", "GET"]
    assert "unchanged" in capsys.readouterr().out and len(_marked(github)) == 1


def test_a_stale_run_does_not_post(github: FakeGitHub, monkeypatch: pytest.MonkeyPatch,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GH_TOKEN", TOKEN)
    assert _comment(github.url, DATA / "ok.json", "--token-env", "GH_TOKEN", "--head-sha", "b" * 40) == 0
    assert [m for m, _, _ in github.requests] == ["GET"] and not github.comments
    assert "not posted" in capsys.readouterr().out
    assert _comment(github.url, DATA / "ok.json", "--token-env", "GH_TOKEN", "--head-sha", HEAD) == 0
    assert len(_marked(github)) == 1


@pytest.mark.parametrize("status, words", [(401, ["HTTP 401", "Bad credentials", "token was refused"]),
                                           (404, ["HTTP 404", "no such repository or pull request"]),
                                           (403, ["HTTP 403", "pull-requests: write", "workflow_run"])])
def test_http_errors_exit_2_with_what_to_check(status: int, words: list[str], monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    for srv in _serve(status):
        assert _comment(srv.url, DATA / "ok.json") == 2
        assert not srv.comments and [m for m, _, _ in srv.requests] == ["GET"]
    err = capsys.readouterr().err
    assert err.startswith("ipcbench comment: GET ") and all(w in err for w in words), err
    assert "Traceback" not in err


def test_refused_connection_and_bad_input_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert _comment(f"http://127.0.0.1:{port}", DATA / "ok.json") == 2
    assert "cannot reach the GitHub API" in capsys.readouterr().err
    monkeypatch.delenv("GITHUB_TOKEN")
    assert _comment("http://127.0.0.1:9", DATA / "ok.json") == 2
    assert "$GITHUB_TOKEN is not set" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    assert main(["comment", "--json", str(DATA / "ok.json"), "--repo", "not-a-repo", "--pr", "1"]) == 2
    assert "OWNER/NAME" in capsys.readouterr().err
    assert main(["comment", "--json", str(DATA / "ok.json"), "--pr", "1"]) == 2
    assert "--repo and --pr go together" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    for text, words in (("{", "not JSON"), ('{"schema": "x"}', "not a verdicts file"),
                        (json.dumps({"schema": "pytest-ipcbench-verdicts", "version": 9}), "version 9"),
                        (json.dumps({"schema": "pytest-ipcbench-verdicts", "version": 1, "outcome": "OK",
                                     "cases": [{"key": 1}]}), "\"cases\" must be")):
        bad.write_text(text)
        assert main(["comment", "--json", str(bad)]) == 2
        assert words in capsys.readouterr().err
    assert main(["comment", "--json", str(tmp_path / "missing.json")]) == 2
    assert "no such verdicts file" in capsys.readouterr().err


def test_regressions_first_then_undecided_waived_noise_and_link() -> None:
    body = render(load_verdicts(DATA / "regression.json"), run_url="https://ci.invalid/run/9", artifact="perf-gate-report")
    assert body.startswith(MARKER + "\n")
    order = [body.index(s) for s in ("#### Regressions (2)", "#### Inconclusive (1)", "#### Waived (1)",
                                     "**Noise:**", "https://ci.invalid/run/9")]
    assert order == sorted(order)
    regressions = body[body.index("#### Regressions"):body.index("#### Inconclusive")]
    # the slowest first, with ratio, interval and counter words; a counter regression with an unchanged time too
    assert regressions.index("broadcast/shm/bytes/ndarray/1MB/r4 | 1.52x | 1.31-1.77x") < \
        regressions.index("pingpong/zmq/bytes/tiny/64B/r2 | 1.01x")
    assert "+1 copy of 999 KB per message" in regressions and "+1 write-family call per message" in regressions
    assert "stream/mp-queue" not in regressions  # waived: listed apart, never a regression
    assert "pickle protocol 5 change, tracked in #41 | 2026-12-31" in body
    assert "3 more rounds a side" in body and "(looks slower)" in body


def test_inconclusive_lists_what_would_decide_and_ok_has_no_sections() -> None:
    body = render(load_verdicts(DATA / "inconclusive.json"))
    assert "INCONCLUSIVE" in body and "#### Regressions" not in body
    rows = [ln for ln in body.splitlines() if ln.startswith("| broadcast") or ln.startswith("| pingpong")]
    assert rows[0].startswith("| broadcast/shm/bytes/ndarray/1MB/r4 (looks slower) | 1.71x")  # looks slower first
    assert "no calibration" in body and "a calibration (ipcbench calibrate)" in body and "⚠️ the two runs" in body
    ok = render(load_verdicts(DATA / "ok.json"))
    assert "✅ OK" in ok and "####" not in ok and "All cases: 1 faster, 3 unchanged." in ok


def test_a_forks_strings_cannot_break_the_table_and_long_lists_are_cut(tmp_path: Path) -> None:
    data = load_verdicts(DATA / "regression.json")
    case = dict(data["cases"][0], key="a|b<script>", counter_words=["x\n| y"])
    many = [dict(data["cases"][0], key=f"broadcast/shm/bytes/ndarray/{i}KB/r4") for i in range(MAX_ROWS + 5)]
    body = render(dict(data, cases=[case, *many]))
    assert "a\\|b&lt;script&gt;" in body and "<script>" not in body and "x \\| y" in body
    assert "… and 6 more regressions" in body


def test_docs_show_the_three_samples_as_rendered() -> None:
    """docs/pull-requests.md holds each sample comment exactly as `ipcbench comment` renders it."""
    text = DOCS.read_text()
    for name in ("regression", "inconclusive", "ok"):
        body = render(load_verdicts(DATA / f"{name}.json"), run_url="https://github.com/acct/proj/actions/runs/123",
                      artifact="perf-gate-report")
        assert body in text, f"docs/pull-requests.md: the {name} sample is not the rendered one (regenerate it)"
    assert "ipcbench comment --json tests/data/verdicts/" in text


@pytest.mark.parametrize("name", ["regression", "inconclusive", "ok"])
def test_the_samples_follow_the_verdicts_schema(name: str) -> None:
    """The hand-written samples the comment is tested on follow the schema `--json` writes."""
    jsonschema = pytest.importorskip("jsonschema", reason="jsonschema is in the dev extra")
    schema = DOCS.parent / "verdicts.schema.json"
    if not schema.is_file():
        pytest.skip("docs/verdicts.schema.json (the verdicts file's schema) is not in this checkout yet")
    jsonschema.validate(json.loads((DATA / f"{name}.json").read_text()), json.loads(schema.read_text()))
