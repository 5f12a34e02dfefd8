"""``ipcbench comment``: a verdicts file as markdown, printed (a job summary) or posted as the pull
request's one comment (created once, then updated)."""

from __future__ import annotations

import argparse
import os
import sys

from ..core.checks import name, text, whole
from ..core.errors import UsageError
from ..core.github import API_URL, Client, check_target, pull_head, upsert_comment
from ..core.options import Option, add_arguments
from ..report.pull_request import MARKER, load_verdicts, render

HELP = ("render a verdicts file (gate/compare --json) as markdown: print it (a job summary), or with "
        "--repo and --pr post or update the pull request's one comment")


#: ``ipcbench comment``'s options (core/options.py says how a table is read)
COMMENT: tuple[Option, ...] = (
    Option("verdicts", text, "the verdicts file of `ipcbench gate/compare --json FILE`", flag="--json", metavar="FILE",
           required=True),
    Option("repo", name, "the repository of the pull request (with --pr)", flag="--repo", metavar="OWNER/NAME"),
    Option("pr", whole(1, 10**9), "the pull request's number (with --repo)", flag="--pr", metavar="N"),
    Option("api_url", text, f"GitHub's REST API (default $GITHUB_API_URL or {API_URL})", flag="--api-url",
           metavar="URL", default=os.environ.get("GITHUB_API_URL") or API_URL),
    Option("token_env", name, "the environment variable that holds the token (default GITHUB_TOKEN)",
           flag="--token-env", metavar="NAME", default="GITHUB_TOKEN"),
    Option("run_url", text, "the CI run whose report this is (linked in the comment)", flag="--run-url", metavar="URL"),
    Option("artifact", name, "the name of the run's artifact holding the report", flag="--artifact", metavar="NAME"),
    Option("head_sha", name, "post only if the pull request's head is still this commit (the one measured); otherwise "
           "say so and exit 0: a newer run will post", flag="--head-sha", metavar="SHA"),
)


def configure(parser: argparse.ArgumentParser) -> None:
    add_arguments(parser, COMMENT)


def run(args: argparse.Namespace) -> int:
    verdicts = load_verdicts(args.verdicts)
    body = render(verdicts, run_url=args.run_url, artifact=args.artifact)
    if args.repo is None and args.pr is None:
        sys.stdout.write(body)
        return 0
    if args.repo is None or args.pr is None:
        raise UsageError("--repo and --pr go together (without both, the markdown is printed)")
    check_target(args.repo, args.pr, args.api_url)
    token = os.environ.get(args.token_env, "")
    if not token:
        raise UsageError(f"${args.token_env} is not set: it must hold a token that may write pull request "
                         f"comments (in a workflow: `env: {args.token_env}: ${{{{ github.token }}}}`)")
    client = Client(token, args.api_url)
    if args.head_sha:
        head = pull_head(client, args.repo, args.pr)
        if head != args.head_sha:
            print(f"ipcbench comment: not posted: {args.repo}#{args.pr}'s head is now {head[:12]}, these verdicts "
                  f"are of {args.head_sha[:12]} (the run of the newer commit posts)")
            return 0
    posted = upsert_comment(client, args.repo, args.pr, body, MARKER)
    print(f"ipcbench comment: {posted.action} comment {posted.id} on {args.repo}#{args.pr} {posted.url}".rstrip())
    return 0
