"""Nothing of the panel is imported while ``panel_listen`` is unset: the device service on a
64 MB router pays for it only when it is configured."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _modules_after_build(tmp_path, config: str) -> set[str]:
    script = textwrap.dedent(f"""
        import sys
        from edge_runtime.cli.serve import build_service
        from edge_runtime.service.config import load_config
        config = load_config(env={config!r})
        build_service({str(tmp_path / 'edge.db')!r}, config)
        print(" ".join(sorted(sys.modules)))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    return set(done.stdout.split())


def test_no_panel_module_nor_h11_without_panel_listen(tmp_path) -> None:
    modules = _modules_after_build(tmp_path, {})
    assert not {m for m in modules if m.startswith(("edge_runtime.panel", "h11", "edge_runtime.local.panel_auth"))}


def test_configured_the_panel_is_still_imported_only_once_the_service_starts_it(tmp_path) -> None:
    modules = _modules_after_build(tmp_path, {"EDGE_RUNTIME_PANEL_LISTEN": "127.0.0.1:5700"})
    assert "h11" not in modules and "edge_runtime.panel.server" not in modules
