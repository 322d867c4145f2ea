"""``python -m lookbench_pipeline.cli``: the ``lookbench`` command, with Ctrl-C one line and exit 130 from the
start as for the console script (:mod:`lookbench_pipeline.console`): the package's ``__init__``, which Python
imports first, loads the command line under :func:`~lookbench_pipeline.early_interrupt.quiet_ctrl_c_while_loading`
when run so, and the command runs through the same
:func:`~lookbench_pipeline.early_interrupt.run_quietly`."""

from ..early_interrupt import run_quietly
from .main import main

raise SystemExit(run_quietly(main))
