"""Run PyInstaller for a router target under qemu-user and publish its artifacts (build/cross/cross.sh).

PyInstaller must run on the interpreter whose libpython and extension modules it collects: the
target's CPython (build-python.sh) runs here through binfmt_misc + qemu-user, with the host's LLVM
tools standing in for strip/objcopy (build/cross/toolchain.sh). The results, named by target:

- ``dist/cross/<target>/edge-runtime-<version>-linux-<openwrt arch>-musl``: the one-file executable
  (``edge-runtime`` beside it is a symlink to it, the name the smoke test and the audit expect);
- ``dist/cross/<target>/edge-runtime-<version>-linux-<openwrt arch>-musl.tar.xz``: the one-folder build,
  with the OpenWrt installer script (build/openwrt/install.sh) and the files it installs;
- ``dist/cross/<target>/build-info.json``: what it was built from (also inside both artifacts).

Then the audit, unchanged, with the target's budget from build/budget.toml.
Usage: package.py TARGET (the environment carries the facts of build/cross/targets.sh)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "build"))
import build as host_build  # noqa: E402  (build/build.py: the same publishing as `make build`)


def used_inputs(target_dir: Path) -> list[dict[str, str]]:
    """What fetch.sh actually used (``$TARGET_DIR/inputs.used``), not merely what the lock pins.

    ``how`` is ``pinned`` (the lock's file), ``same-orig`` (a newer Debian revision delivered the
    pinned upstream tarball, same sha256) or ``apt-verified`` (a newer Debian revision of a binary
    package, checked by apt against Debian's signed index); ``pinned`` then names the lock's version.
    """
    entries = []
    for line in (target_dir / "inputs.used").read_text().splitlines():
        name, version, sha256, file, how, pinned = line.split()
        entry = {"name": name, "version": version, "sha256": sha256, "file": file, "how": how}
        if how != "pinned":
            entry["pinned"] = pinned
        entries.append(entry)
    return entries


def git_commit() -> str | None:
    result = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return result.stdout.strip() or None


def main() -> int:
    target = sys.argv[1]
    env = os.environ
    prefix, sysroot, tc_bin = Path(env["PREFIX"]), Path(env["SYSROOT"]), Path(env["TC_BIN"])
    name = f"edge-runtime-{host_build.project_version()}-linux-{env['OPENWRT_ARCH']}-musl"
    out = ROOT / "dist" / "cross" / target
    work = ROOT / "build" / "work" / "cross" / target
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)

    info = {
        "target": target,
        "name": name,
        "zigTarget": env["ZIG_TARGET"],
        "cpu": env["CPU"],
        "loader": f"/lib/{env['LOADER']}",
        "musl": env["MUSL_VERSION"],
        "source": git_commit(),
        "inputs": used_inputs(Path(env["TARGET_DIR"])),
    }
    info_file = work / "build-info.json"
    info_file.write_text(json.dumps(info, indent=2) + "\n")

    run_env = {
        **{k: v for k, v in env.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))},
        "PATH": f"{tc_bin}:{env['PATH']}",
        "QEMU_LD_PREFIX": str(sysroot),
        "LD_LIBRARY_PATH": str(prefix / "lib"),
        "PYTHONNODEBUGRANGES": "1",
        "PYTHONHASHSEED": "0",
    }
    staged = {}
    for form, level, extra in (
        ("onefile", 9, []),
        ("onefolder", 0, ["--folder-name", name]),
    ):
        command = [
            str(prefix / "bin" / "python3.11"), "-m", "PyInstaller", "--noconfirm", "--log-level=WARN",
            f"--workpath={work / form}", f"--distpath={work / 'dist' / form}",
            str(ROOT / "build" / "edge-runtime.spec"), "--", "--form", form, "--build-info", str(info_file),
            "--monitor", str(Path(env["TARGET_DIR"]) / "monitor" / "edge-runtime-monitor"), *extra,
        ]
        print(f"== PyInstaller ({form}) under {env['QEMU']}", flush=True)
        result = subprocess.run(command, cwd=ROOT, env={**run_env, "PYINSTALLER_ZLIB_COMPRESSION_LEVEL": str(level)},
                                check=False)
        if result.returncode != 0:
            sys.stderr.write(f"Error: PyInstaller ({form}) for {target} failed with exit code {result.returncode}\n")
            return 1
        staged[form] = work / "dist" / form

    # The one-folder build installs itself on OpenWrt without a package manager: its installer
    # script at the top, the init script and UCI defaults it installs in openwrt/ (the packages,
    # openwrt-package.sh, take those two from here too).
    folder = staged["onefolder"] / name
    (folder / "openwrt").mkdir(exist_ok=True)
    for source, destination, mode in (
        ("install.sh", "install.sh", 0o755),
        ("edge-runtime.init", "openwrt/edge-runtime.init", 0o755),
        ("edge-runtime.config", "openwrt/edge-runtime.config", 0o644),
    ):
        (folder / destination).write_bytes((ROOT / "build" / "openwrt" / source).read_bytes())
        (folder / destination).chmod(mode)

    # Publish the way `make build` does (temp file, fsync, rename), into this target's directory.
    onefile = host_build.publish_onefile(staged["onefile"] / "edge-runtime", out / name)
    link = out / "edge-runtime"
    link.unlink(missing_ok=True)
    link.symlink_to(name)
    tarball = host_build.publish_tarball(staged["onefolder"] / name, out / f"{name}.tar.xz")
    (out / "build-info.json").write_text(info_file.read_text())
    for path in (onefile, tarball):
        print(f"== built {path.relative_to(ROOT)}: {path.stat().st_size:,} bytes")

    # The audit, unchanged, against this target's budget.
    with open(ROOT / "build" / "budget.toml", "rb") as file:
        budget = tomllib.load(file)["cross"][target]
    budget_file = work / "budget.toml"
    budget_file.write_text("".join(f"{key} = {value}\n" for key, value in budget.items()))
    audit = subprocess.run(
        [sys.executable, str(ROOT / "artifact_audit.py"), "--budget", str(budget_file),
         "--output", str(out / "audit-report.txt"), str(onefile), str(tarball)],
        check=False,
    )
    return audit.returncode


if __name__ == "__main__":
    sys.exit(main())
