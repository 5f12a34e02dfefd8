"""``ipcbench comment``: a verdicts file as markdown, printed (a job summary) or posted as the pull
request's one comment (created once, then updated)."""

from __future__ import annotations

import argparse
import os
import sys

from ..core.errors import UsageError
from ..core.github import API_URL, Client, check_target, pull_head, upsert_comment
from ..report.pull_request import MARKER, load_verdicts, render

HELP = ("render a verdicts file (gate/compare --json) as markdown: print it (a job summary), or with "
        "--repo and --pr post or update the pull request's one comment")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", required=True, metavar="FILE", dest="verdicts",
                        help="the verdicts file of `ipcbench gate/compare --json FILE`")
    parser.add_argument("--repo", metavar="OWNER/NAME", help="the repository of the pull request (with --pr)")
    parser.add_argument("--pr", type=int, metavar="N", help="the pull request's number (with --repo)")
    parser.add_argument("--api-url", default=os.environ.get("GITHUB_API_URL") or API_URL, metavar="URL",
                        help=f"GitHub's REST API (default $GITHUB_API_URL or {API_URL})")
    parser.add_argument("--token-env", default="GITHUB_TOKEN", metavar="NAME",
                        help="the environment variable that holds the token (default GITHUB_TOKEN)")
    parser.add_argument("--run-url", metavar="URL", help="the CI run whose report this is (linked in the comment)")
    parser.add_argument("--artifact", metavar="NAME", help="the name of the run's artifact holding the report")
    parser.add_argument("--head-sha", metavar="SHA",
                        help="post only if the pull request's head is still this commit (the one measured); "
                             "otherwise say so and exit 0: a newer run will post")


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
