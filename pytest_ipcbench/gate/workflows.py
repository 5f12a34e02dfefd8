"""The GitHub workflows ``ipcbench init-ci`` writes for another project (docs/pull-requests.md):
the gate on pull requests, its comment from ``workflow_run``, with ``--asv`` the asv history to
Pages; each says what it does in its header. Every install line installs ``IPCBENCH_INSTALL``.
"""

from __future__ import annotations

GATE = """\
# Perf gate on pull requests (written by `ipcbench init-ci`): the base branch and the pull request
# are installed side by side and measured in this job, interleaved (base head, head base, ...),
# over the matrix declared in [tool.ipcbench] of {project_dir}pyproject.toml (the gate's cache and
# report are at the top of the repository, .ipcbench-gate/). It fails on a
# regression (exit 1: slower than +10% with 95% confidence, or an exact counter grew) and while
# cases stay undecided (exit 3). The token is read-only (a fork's pull request too): the verdicts
# go to the job summary and, with the pull request's number, into the artifact that
# perf-gate-comment.yml posts. pytest-ipcbench is installed from {install_kind}.
name: perf-gate

on:
  pull_request:

permissions:
  contents: read

concurrency:
  group: perf-gate-${{{{ github.event.pull_request.number }}}}
  cancel-in-progress: true

jobs:
  gate:
    runs-on: ubuntu-24.04
    timeout-minutes: 90
    env:
      BASE_REF: ${{{{ github.base_ref }}}}
      IPCBENCH_INSTALL: "{install}"
      PYTHONUNBUFFERED: "1"
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0  # the gate checks the base commit out into a worktree

      - uses: actions/setup-python@v5
        with:
          python-version: "{python}"

      - name: Install pytest-ipcbench
        run: |
          python -m pip install --upgrade pip
          python -m pip install "${{IPCBENCH_INSTALL}}"

      - name: Environments of earlier runs (keyed by the base commit)
        uses: actions/cache@v4
        with:
          path: .ipcbench-gate/venvs
          key: perf-gate-venvs-${{{{ runner.os }}}}-py{python}-${{{{ github.event.pull_request.base.sha }}}}
          restore-keys: perf-gate-venvs-${{{{ runner.os }}}}-py{python}-

      # the calibration (docs/calibration.md): `ipcbench calibrate` stores it in the user's cache under
      # the machine's and the matrix's digests and the gate finds it there; kept between runs per
      # runner type and pyproject, measured again only when the cache has none
      - name: Calibration of this runner type (kept between runs)
        id: calibration
        uses: actions/cache@v4
        with:
          path: ~/.cache/pytest-ipcbench
          key: ipcbench-calibration-${{{{ runner.os }}}}-${{{{ runner.arch }}}}-py{python}-${{{{ hashFiles('{project_dir}pyproject.toml') }}}}

      - name: Calibrate (only when the cache had none)
        if: steps.calibration.outputs.cache-hit != 'true'
        working-directory: {working_directory}
        run: ipcbench calibrate --plot none

      - name: Perf gate against the base branch
        working-directory: {working_directory}
        # --skip-unadopted-base: the pull request that adds [tool.ipcbench] has nothing to compare with
        run: ipcbench gate --base "origin/${{BASE_REF}}" --skip-unadopted-base --json "${{GITHUB_WORKSPACE}}/.ipcbench-gate/report/verdicts.json"{gate_args}

      - name: Job summary (the pull request comment's text)
        if: always()
        env:
          RUN_URL: ${{{{ github.server_url }}}}/${{{{ github.repository }}}}/actions/runs/${{{{ github.run_id }}}}
          PR_NUMBER: ${{{{ github.event.pull_request.number }}}}
        run: |
          mkdir -p .ipcbench-gate/report
          echo "${{PR_NUMBER}}" > .ipcbench-gate/report/pull-request
          if [ -f .ipcbench-gate/report/verdicts.json ]; then
            ipcbench comment --json .ipcbench-gate/report/verdicts.json --run-url "${{RUN_URL}}" \\
              --artifact perf-gate-report >> "$GITHUB_STEP_SUMMARY"
          elif [ -f .ipcbench-gate/report/compare.md ]; then
            cat .ipcbench-gate/report/compare.md >> "$GITHUB_STEP_SUMMARY"
          else
            echo "The perf gate did not produce a report; see the log of the gate step." >> "$GITHUB_STEP_SUMMARY"
          fi

      - name: Upload the report
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: perf-gate-report
          path: .ipcbench-gate/report/
          if-no-files-found: warn
          retention-days: 30
"""

COMMENT = """\
# The perf gate's verdicts as one comment on the pull request, created once and then updated on
# each push (written by `ipcbench init-ci`). It runs after perf-gate.yml (workflow_run), with a
# token that may write pull request comments, and never checks out or runs the pull request's
# code: it renders the gate's artifact with pytest-ipcbench installed from {install_kind}. The pull
# request's number comes from that artifact (a fork could have written it), so the comment is
# posted only when that pull request's head is the commit the gate measured.
name: perf-gate comment

on:
  workflow_run:
    workflows: [perf-gate]
    types: [completed]

permissions:
  actions: read         # the gate run's artifact
  pull-requests: write  # the comment

jobs:
  comment:
    if: >-
      github.event.workflow_run.event == 'pull_request' &&
      contains(fromJSON('["success", "failure"]'), github.event.workflow_run.conclusion)
    runs-on: ubuntu-24.04
    timeout-minutes: 15
    env:
      IPCBENCH_INSTALL: "{install}"
    steps:
{checkout}
      - uses: actions/setup-python@v5
        with:
          python-version: "{python}"

      - name: Install pytest-ipcbench
        run: python -m pip install "${{IPCBENCH_INSTALL}}"

      - uses: actions/download-artifact@v4
        with:
          name: perf-gate-report
          path: perf-gate-report
          run-id: ${{{{ github.event.workflow_run.id }}}}
          github-token: ${{{{ github.token }}}}

      - name: Post or update the pull request's comment
        env:
          GITHUB_TOKEN: ${{{{ github.token }}}}
          REPO: ${{{{ github.repository }}}}
          HEAD_SHA: ${{{{ github.event.workflow_run.head_sha }}}}
          RUN_URL: ${{{{ github.event.workflow_run.html_url }}}}
        run: |
          if [ ! -f perf-gate-report/verdicts.json ]; then
            echo "no verdicts in the gate's artifact (the gate stopped before its verdicts, or did not gate): nothing to post"
            exit 0
          fi
          ipcbench comment --json perf-gate-report/verdicts.json --repo "${{REPO}}" \\
            --pr "$(cat perf-gate-report/pull-request)" --head-sha "${{HEAD_SHA}}" \\
            --run-url "${{RUN_URL}}" --artifact perf-gate-report
"""

#: the comment job checks out the default branch only to install a spec that lives in it
CHECKOUT = """\
      - uses: actions/checkout@v4  # the default branch (it holds the install spec), never the pull request
        with:
          persist-credentials: false
"""

ASV = """\
# The asv history on every push to the default branch (written by `ipcbench init-ci --asv`): the
# asv suite (benchmarks/bench_ipcbench.py, the matrix of [tool.ipcbench]) runs on the pushed
# commits, earlier commits' results come from the cache, and asv's HTML with the history's
# picture (each commit's median with its 99% interval, history.png) is published to GitHub Pages
# (Settings > Pages > Source: GitHub Actions). pytest-ipcbench is installed from {install_kind}.
name: asv-history

on:
  push:
    branches: [{branch}]
  workflow_dispatch:

permissions:
  contents: read

concurrency:
  group: asv-history
  cancel-in-progress: false

jobs:
  history:
    runs-on: ubuntu-24.04
    timeout-minutes: 180
    env:
      IPCBENCH_INSTALL: "{install}"
      PYTHONUNBUFFERED: "1"
    defaults:
      run:
        working-directory: {working_directory}
    steps:
      - uses: actions/checkout@v4
        with:
          fetch-depth: 0  # asv checks out each new commit

      - uses: actions/setup-python@v5
        with:
          python-version: "{python}"

      - name: Install asv and pytest-ipcbench (for the history's picture)
        working-directory: .
        run: python -m pip install asv virtualenv "${{IPCBENCH_INSTALL}}"

      - name: Earlier commits' results
        uses: actions/cache@v4
        with:
          path: {project_dir}.asv/results
          key: asv-results-${{{{ github.sha }}}}
          restore-keys: asv-results-

      - name: The asv suite on the pushed commits
        env:
          BEFORE: ${{{{ github.event.before }}}}
        run: |
          asv machine --yes --machine github-actions
          if git cat-file -e "${{BEFORE}}^{{commit}}" 2>/dev/null; then range="${{BEFORE}}..${{GITHUB_SHA}}"; else range="${{GITHUB_SHA}}^!"; fi
          asv run --machine github-actions --skip-existing-commits "${{range}}"

      - name: asv's HTML and the history with intervals
        run: |
          asv publish
          python -m pytest_ipcbench.runner.asv_suite plot .asv/results --out .asv/html/history.png

      - uses: actions/upload-pages-artifact@v3
        with:
          path: {project_dir}.asv/html

  deploy:
    needs: history
    runs-on: ubuntu-24.04
    permissions:
      pages: write
      id-token: write
    environment:
      name: github-pages
      url: ${{{{ steps.deployment.outputs.page_url }}}}
    steps:
      - id: deployment
        uses: actions/deploy-pages@v4
"""

#: file names beside the gate's workflow
COMMENT_FILE = "perf-gate-comment.yml"
ASV_FILE = "asv-history.yml"


def render(template: str, *, install: str, install_kind: str, python: str, project_dir: str, gate_args: str = "",
           branch: str = "main", checkout: bool = False) -> str:
    return template.format(install=install, install_kind=install_kind, python=python, project_dir=project_dir,
                           working_directory=project_dir.rstrip("/") or ".", branch=branch,
                           gate_args=f" {gate_args}" if gate_args else "", checkout=CHECKOUT if checkout else "")
