"""Draw the fourth mutation round's uniform sample of one module's mutants (docs/testing.md).

Usage: ``python sample.py MODULE N [FUNCTIONS]`` (run from the repository root after mutmut has
generated ``mutants/``), e.g. ``python sample.py decision 60``. Prints the first N names of the
module's mutant names (the keys of ``mutants/scheduler_extender/MODULE.py.meta``; with
FUNCTIONS, a comma-separated list of mutmut function names, only those functions' mutants),
sorted and shuffled with ``random.Random(12)``. verbs.py's functions no earlier round ran are
:data:`VERBS_REST` (pass ``verbs-rest`` as FUNCTIONS). A larger N extends a smaller one's
list, so a sample grown later is still uniform. The names drawn in the round are the
``*-sample.txt`` files next to this one (``binding-survivors.txt``: the re-run survivors).
"""

import json
import random
import sys

#: verbs.py's functions whose mutants no earlier round ran (docs/testing.md).
VERBS_REST = (
    "xǁExtenderǁ__init__", "xǁExtenderǁ_parse_pod", "xǁExtenderǁ_ask", "x__candidates",
    "x__filter_result", "x__version_key",
)

module, n = sys.argv[1], int(sys.argv[2])
with open(f"mutants/scheduler_extender/{module}.py.meta", encoding="utf-8") as f:
    names = sorted(json.load(f)["exit_code_by_key"])
if len(sys.argv) > 3:
    functions = set(VERBS_REST if sys.argv[3] == "verbs-rest" else sys.argv[3].split(","))
    names = [k for k in names if k.split("__mutmut_")[0].rsplit(".", 1)[-1] in functions]
random.Random(12).shuffle(names)
print("\n".join(names[:n]))
