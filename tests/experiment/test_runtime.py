"""harness.runtime.long_lived, run in fresh interpreters (freezing is process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import PROJECT_ROOT


def _python(code: str) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_first_import_freezes_once_and_reenables_the_collector():
    out = _python(
        """
        import gc
        from harness.runtime import long_lived

        before = gc.get_freeze_count()
        with long_lived("json.tool"):
            paused = not gc.isenabled()
            import json.tool
        after_first = gc.get_freeze_count()
        with long_lived("json.tool"):  # already imported: nothing happens
            paused_again = not gc.isenabled()
        print(before, paused, after_first > before, gc.isenabled(), paused_again, gc.get_freeze_count() == after_first)
        """
    )
    assert out == "0 True True True False True"


def test_nested_blocks_act_once_and_a_disabled_collector_is_left_alone():
    out = _python(
        """
        import gc
        from harness.runtime import long_lived

        with long_lived("json.tool"):
            with long_lived("csv"):
                pass
            inner_left_paused = not gc.isenabled()
            frozen_inside = gc.get_freeze_count()
        frozen_after = gc.get_freeze_count()
        gc.unfreeze()
        gc.disable()
        with long_lived("wave"):
            import wave
        print(inner_left_paused, frozen_inside, frozen_after > 0, gc.isenabled(), gc.get_freeze_count())
        """
    )
    assert out == "True 0 True False 0"


def test_an_error_in_the_block_still_reenables_the_collector():
    out = _python(
        """
        import gc
        from harness.runtime import long_lived

        try:
            with long_lived("no_such_module_here"):
                import no_such_module_here
        except ModuleNotFoundError:
            pass
        print(gc.isenabled())
        """
    )
    assert out == "True"
