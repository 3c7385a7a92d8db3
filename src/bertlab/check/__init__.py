"""`bertlab check`: run the public tests against the student's exercises/ and say what to do next.

The tests (``bertlab/public_tests/``, installed with the package) run in a child process
(``python -m pytest <public_tests> -m <tasks> --impl <exercises folder>``, from the workspace), so a
student module that crashes, hangs or calls ``exit()`` cannot take the checker down with it. The
package's events.py is the pytest plugin of that child (``-p bertlab.check.events``): when BERTLAB_CHECK_REPORT names
a file, the plugin appends one JSON line per event to it (tests collected, test started, test result,
collection error, session finished); the parent reads the file as it grows to show progress, then
prints one row per task (passed/total and a status), the first failure of each unfinished task in
full with a hint, the learner's recorded progress, and the next task to work on.

Statuses: ``passed`` (every test passed), ``not started`` (nothing passed and every failure is a stub
still raising NotImplementedError: the plugin records the task and function a stub's NotImplementedYet
carries, so the hint names them), ``failed`` (anything else), ``not run`` (an earlier test ended the
run before this task's tests), ``no tests`` (none collected). Progress records the first three.

Output is rich when stdout is a terminal, plain text otherwise (or when NO_COLOR is set), so a CI log
or a pasted report stays readable. Exit status: 0 only when every selected task passed.

On Linux every check is *guarded* (guard.py): the child runs under a small guard process that kills
whatever the check started once it ends, or once the checker goes away (ended, or killed with SIGTERM
or SIGKILL). ``bertlab check --watch`` (watch.py) keeps one warm process (warm.py) that has imported
torch, transformers and the public tests once, forks a guarded child from it for every check, and
checks again the tasks a save affects (affected.py), each time with the same report.

In a notebook, ``bertlab.check("pooling")`` runs the same check and shows it under the cell
(notebook.py). ``bertlab.check`` is this package, made callable below: a function of that name in
bertlab/__init__.py would be replaced by this package the moment anything imports one of its modules
(``import bertlab.check.run`` sets the attribute ``check`` of ``bertlab``), so the package itself is the
function, whichever is imported first.
"""

import sys
import types
from pathlib import Path
from typing import Optional

# The command lives in a package of one job per module (events.py: the child's plugin; run.py: the
# parent that runs and follows it; guard.py: a check's processes die with it; warm.py: the watcher's
# preloaded process and its forked checks; affected.py: which tasks a saved file affects; watch.py:
# the watch loop; hints.py; display.py; command.py; notebook.py). Import a name from the module that
# defines it: the package itself holds only the notebook call.
from bertlab.check.notebook import CheckResult, check as _check_in_notebook


class _CallablePackage(types.ModuleType):
    """The class of this package: a module whose call is notebook.check."""

    def __call__(self, task: Optional[str] = None, *, verbose: bool = False,
                 directory: Optional[Path] = None) -> CheckResult:
        """``bertlab.check("pooling")``: `bertlab check --task pooling` from a notebook cell, shown under
        it; ``bertlab.check()`` checks every task (``bertlab.check_all()``). verbose: every test (-v);
        directory: the exercises folder (--dir), by default found from the notebook's folder."""
        return _check_in_notebook(task, verbose=verbose, directory=directory)


sys.modules[__name__].__class__ = _CallablePackage
