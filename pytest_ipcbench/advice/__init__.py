"""``ipcbench advise``: the fastest way to move *your* object here, measured on it, with the reason.

Features of the object (features.py), a prior that shortlists (prior.py), a race of the
shortlisted (backend, mode) pairs on the object with the harness's interleaved measurement and
its intervals (race.py), the decision as a record (decision.py), the driver (driver.py), a
sentence read as an object for the prior alone (describe.py) and the evaluation's public case
generator (cases.py). docs/advise.md.
"""

from .decision import Advice, Candidate
from .driver import advise, advise_described
from .features import Features, features

__all__ = ["Advice", "Candidate", "Features", "advise", "advise_described", "features"]
