"""kitm.serving.versions: the temporaries of killed exports are removed, a live writer's are not."""

import os
import subprocess
import sys

from kitm.serving.versions import remove_stale_exports, version_numbers


def test_stale_temporary_exports_are_removed_and_a_live_writers_kept(tmp_path, capsys):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, live = int(gone.stdout), os.getppid()  # a finished process; pytest's parent lives
    base = tmp_path / "export"
    for name in ("2", f"3.{dead}.tmp", f"4.{live}.tmp", f"5.{os.getpid()}.tmp"):
        (base / name).mkdir(parents=True)
        (base / name / "saved_model.pb").write_bytes(b"x")
    (base / "notes.tmp").write_text("not an export")
    removed = remove_stale_exports(base)
    assert sorted(path.name for path in removed) == [f"3.{dead}.tmp", f"5.{os.getpid()}.tmp"]
    assert sorted(path.name for path in base.iterdir()) == ["2", f"4.{live}.tmp", "notes.tmp"]
    assert "Removed 2 unfinished export(s) left by killed runs" in capsys.readouterr().out
    # A run holding its folder (kitm.run_lock) removes every temporary: no one else exports there.
    assert [path.name for path in remove_stale_exports(base, every=True)] == [f"4.{live}.tmp"]
    assert version_numbers(base) == [2] and remove_stale_exports(tmp_path / "absent") == []
