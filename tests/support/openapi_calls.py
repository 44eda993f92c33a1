"""The calls QingLong's clients make that the device refuses on purpose (docs/qinglong.md), as each
client sends them (the reference's client tables): method, target and body."""

from __future__ import annotations

import json

#: (method, target, body): qinglongsdk/qinglongtool (qlconfig, qldependence, qlscript, qlsystem),
#: qinglong-app-sdk (cfg_*, sys_reload), QingLong's own shell and panel (system, user, crons).
REFUSED_CALLS: list[tuple[str, str, bytes | None]] = [
    ("GET", "/open/configs/files", None),
    ("GET", "/open/configs/config.sh", None),
    ("GET", "/open/configs/detail?path=config.sh", None),
    ("POST", "/open/configs/save", json.dumps({"name": "config.sh", "content": "export X=1"}).encode()),
    ("GET", "/open/dependence", None),
    ("POST", "/open/dependencies", json.dumps([{"name": "requests", "type": 1}]).encode()),
    ("GET", "/open/scripts/files", None),
    ("GET", "/open/scripts/jd_bean.js", None),
    ("POST", "/open/scripts/", json.dumps(json.dumps({"filename": "x.js", "path": "", "content": "x",
                                                      "originFilename": "x.js"})).encode()),
    ("PUT", "/open/scripts/", json.dumps({"filename": "x.js", "path": "", "content": "x"}).encode()),
    ("DELETE", "/open/scripts/", json.dumps({"filename": "x.js", "path": ""}).encode()),
    ("POST", "/open/scripts/download", json.dumps({"filename": "x.js"}).encode()),
    ("PUT", "/open/scripts/run", json.dumps({"filename": "x.js", "path": ""}).encode()),
    ("PUT", "/open/scripts/stop", json.dumps({"filename": "x.js", "path": ""}).encode()),
    ("GET", "/open/system/log/remove", None),
    ("PUT", "/open/system/log/remove", json.dumps({"frequency": 7}).encode()),
    ("PUT", "/open/system/update-check", None),
    ("PUT", "/open/system/update", None),
    ("PUT", "/open/system/reload", None),
    ("PUT", "/open/system/command-run", json.dumps({"command": "id"}).encode()),
    ("PUT", "/open/system/command-stop", json.dumps({"command": "id"}).encode()),
    ("PUT", "/open/system/auth/reset", json.dumps({"username": "admin", "password": "x"}).encode()),
    ("PUT", "/open/system/data/export", json.dumps({"type": ["base"]}).encode()),
    ("PUT", "/open/system/notify?t=1", json.dumps({"title": "t", "content": "c"}).encode()),
    ("POST", "/open/user/login", json.dumps({"username": "admin", "password": "x"}).encode()),
    ("PUT", "/open/user", json.dumps({"username": "admin", "password": "x"}).encode()),
    ("PUT", "/open/user/init", json.dumps({"username": "admin", "password": "x"}).encode()),
    ("POST", "/open/user/notification", json.dumps({"type": "lark", "larkKey": "k"}).encode()),
    ("POST", "/open/apps", json.dumps({"name": "x", "scopes": ["system"]}).encode()),
    ("PUT", "/open/update/system", None),
    ("PUT", "/open/crons/status", json.dumps({"ids": ["1"], "status": "0", "pid": "1"}).encode()),
    ("GET", "/open/crons/import", None),
    ("POST", "/open/envs/upload", b"--x--"),
    ("DELETE", "/open/logs", json.dumps({"filename": "x.log", "path": "x"}).encode()),
    ("POST", "/open/subscriptions", json.dumps({"type": "public-repo", "url": "https://example.org/x.git",
                                                "schedule": "0 0 * * *", "alias": "x"}).encode()),
    ("PUT", "/open/subscriptions", json.dumps({"id": 1, "url": "https://example.org/y.git"}).encode()),
    ("DELETE", "/open/subscriptions", json.dumps([1]).encode()),
    ("PUT", "/open/subscriptions/status", json.dumps({"ids": [1], "status": "1"}).encode()),
]
