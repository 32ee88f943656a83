"""A process started with SIGINT and SIGTERM ignored (a backgrounded shell command) gives them back their
defaults before it starts anything, so its children can be stopped with SIGTERM (orchestration.signals)."""

import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# the child reports the ignored-signal mask of a grandchild it starts, before and after heed_interrupts()
CHILD = """
import subprocess
from orchestration.signals import heed_interrupts

def ignored_by_a_child():
    out = subprocess.run(["grep", "SigIgn", "/proc/self/status"], capture_output=True, text=True).stdout
    return int(out.split()[1], 16)

before = ignored_by_a_child()
heed_interrupts()
print(before, ignored_by_a_child())
"""


def _ignore_interrupts() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def test_ignored_interrupts_are_not_passed_on_to_children():
    res = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, capture_output=True, text=True, timeout=60,
        preexec_fn=_ignore_interrupts,
    )
    assert res.returncode == 0, res.stderr
    before, after = (int(x) for x in res.stdout.split())
    bit = {s: 1 << (s - 1) for s in (signal.SIGINT, signal.SIGTERM)}  # /proc SigIgn: bit n-1 for signal n
    assert before & bit[signal.SIGINT] and before & bit[signal.SIGTERM]  # the setup really ignores them
    assert not after & bit[signal.SIGINT] and not after & bit[signal.SIGTERM]


def test_a_handler_the_program_installed_is_kept():
    code = (
        "import signal\nfrom orchestration.signals import heed_interrupts\n"
        "h = lambda *a: None\nsignal.signal(signal.SIGTERM, h)\nheed_interrupts()\n"
        "print(signal.getsignal(signal.SIGTERM) is h)"
    )
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "True", res.stderr
