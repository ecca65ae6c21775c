"""Runs as root inside the booted container (Debian's python3, stdlib only).

Writes /out/result.json: one key per check, each a plain value the host test asserts on,
plus "error" when a phase crashed. Always powers the container off at the end."""

import json
import os
import re
import subprocess
import threading
import time
import traceback
import urllib.error
import urllib.request

UNIT = "appliance.service"
BASE = "http://127.0.0.1:8000"
STORE = "/var/lib/appliance/models"
R = {"phases": []}


def show(*props):
    out = subprocess.run(["systemctl", "show", UNIT] + [f"-p{p}" for p in props],
                         capture_output=True, text=True).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def request(path, key=None, body=None, timeout=10):
    headers = {"content-type": "application/json"}
    if key:
        headers["authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(BASE + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return None, b""


def status_of(pid):
    text = open(f"/proc/{pid}/status").read()
    return dict(re.findall(r"^(\w+):\s*(.*)$", text, re.M))


def engine_pid(main):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
            cmd = open(f"/proc/{entry}/cmdline", "rb").read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == main and b"vllm" in cmd:
            return int(entry)
    return None


def wait_active(deadline_s):
    """Poll until active/failed; returns (state, ready code when first seen active, log)."""
    t0 = time.monotonic()
    seen = []
    while time.monotonic() - t0 < deadline_s:
        state = show("ActiveState")["ActiveState"]
        code, _ = request("/health/ready", timeout=3)
        if not seen or seen[-1][0] != state:
            seen.append((state, code, round(time.monotonic() - t0, 1)))
        if state == "activating":
            name = "ready_while_activating" if code == 200 else "not_ready_while_activating"
            R[name] = R.get(name, 0) + 1
        if state == "active":
            return state, code, seen, time.monotonic() - t0
        if state == "failed":
            return state, code, seen, time.monotonic() - t0
        time.sleep(0.25)
    return "timeout", None, seen, time.monotonic() - t0


def phase_start():
    state, code, seen, took = wait_active(1200)
    R.update(start_state=state, ready_code_when_active=code, start_states=seen,
             start_s=round(took, 1))


def phase_sandbox():
    props = show("MainPID", "StatusText", "WatchdogUSec", "User", "NRestarts")
    pid = int(props["MainPID"])
    R["status_text"] = props["StatusText"]
    R["watchdog_usec"] = props["WatchdogUSec"]
    st = status_of(pid)
    uid = subprocess.run(["id", "-u", "appliance"], capture_output=True, text=True).stdout.strip()
    R.update(service_uid=uid, proc_uid=st["Uid"].split()[0], seccomp=st["Seccomp"],
             no_new_privs=st["NoNewPrivs"], cap_eff=st["CapEff"], cap_bnd=st["CapBnd"],
             cap_prm=st["CapPrm"])
    touch = subprocess.run(["nsenter", "-t", str(pid), "-m", "touch", "/usr/.appliance-probe"],
                           capture_output=True, text=True)
    R["usr_write"] = [touch.returncode, touch.stderr.strip()]
    cred = f"/run/credentials/{UNIT}/api-keys"
    info = os.stat(cred)
    R.update(cred_uid=str(info.st_uid), cred_mode=oct(info.st_mode & 0o777))
    other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "cat", cred], capture_output=True, text=True)
    R["cred_other_user"] = [other.returncode, other.stderr.strip()]
    key = open("/etc/appliance/api-keys").read().split()[0]
    environ = open(f"/proc/{pid}/environ", "rb").read()
    R["key_in_environ"] = key.encode() in environ
    R["models_with_key"] = request("/v1/models", key=key)[0]
    R["models_without_key"] = request("/v1/models")[0]
    body = {"model": "appliance-model", "max_tokens": 8,
            "messages": [{"role": "user", "content": "Say hi"}]}
    R["chat_code"] = request("/v1/chat/completions", key=key, body=body, timeout=120)[0]
    store_checks(pid)
    first = show("WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]
    time.sleep(35)  # keep-alives every WatchdogSec/2 = 30 s
    second = show("WatchdogTimestampMonotonic")["WatchdogTimestampMonotonic"]
    R["watchdog_pings"] = [first, second]


def store_checks(main):
    """The engine loads the store's version in place; nothing in the store is writable by
    the service user (file modes), nor by anyone inside the unit's mount namespace."""
    engine = engine_pid(main)
    args = open(f"/proc/{engine}/cmdline", "rb").read().decode().split("\0")
    R["engine_model_arg"] = args[args.index("--model") + 1] if "--model" in args else args
    name_dir = f"{STORE}/default"
    digests = [d for d in os.listdir(name_dir) if len(d) == 64]
    R["store_versions"] = digests
    version = f"{name_dir}/{digests[0]}" if digests else name_dir
    writes = {}
    for folder in (STORE, name_dir, version, f"{version}/model"):
        probe = subprocess.run(["setpriv", "--reuid=appliance", "--regid=appliance",
                                "--init-groups", "touch", f"{folder}/.appliance-probe"],
                               capture_output=True, text=True)
        writes[folder] = [probe.returncode, probe.stderr.strip()]
    for item in (f"{name_dir}/state.json", f"{version}/model.sig", f"{version}/record.json"):
        probe = subprocess.run(["setpriv", "--reuid=appliance", "--regid=appliance",
                                "--init-groups", "sh", "-c", f'echo x >> "{item}"'],
                               capture_output=True, text=True)
        writes[item] = [probe.returncode, probe.stderr.strip()]
    R["store_user_writes"] = writes
    inside = subprocess.run(["nsenter", "-t", str(main), "-m", "touch",
                             f"{STORE}/.appliance-probe"], capture_output=True, text=True)
    R["store_ns_write"] = [inside.returncode, inside.stderr.strip()]


def phase_engine_kill():
    main = int(show("MainPID")["MainPID"])
    victim = engine_pid(main)
    R["engine_pid"] = victim
    before = int(show("NRestarts")["NRestarts"])
    os.kill(victim, 9)
    t0 = time.monotonic()
    # Back means: the unit is active and the gateway answers ready again, whichever brought
    # the engine back (the appliance's own supervisor restarts it in place, issue 7; systemd
    # restarts the unit when the appliance gives up).
    seen, state, code = [], None, None
    while time.monotonic() - t0 < 1200:
        state = show("ActiveState")["ActiveState"]
        code, _ = request("/health/ready", timeout=3)
        if not seen or seen[-1][:2] != (state, code):
            seen.append((state, code, round(time.monotonic() - t0, 1)))
        if (state == "active" and code == 200) or state == "failed":
            break
        time.sleep(0.25)
    props = show("NRestarts", "MainPID")
    R.update(after_kill_state=state, after_kill_ready=code, after_kill_states=seen,
             restart_s=round(time.monotonic() - t0, 1),
             restarts=int(props["NRestarts"]) - before,
             new_engine_pid=engine_pid(int(props["MainPID"])))


def phase_drain():
    key = open("/etc/appliance/api-keys").read().split()[0]
    body = json.dumps({"model": "appliance-model", "max_tokens": 16, "stream": True,
                       "messages": [{"role": "user", "content": "Count to twenty."}]}).encode()
    req = urllib.request.Request(BASE + "/v1/chat/completions", data=body, headers={
        "content-type": "application/json", "authorization": f"Bearer {key}"})
    started = threading.Event()
    chunks = []

    def client():
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                for line in resp:
                    chunks.append(line.decode().strip())
                    started.set()
        except Exception as exc:  # noqa: BLE001 - recorded, asserted on the host
            chunks.append(f"error: {exc!r}")
        started.set()

    thread = threading.Thread(target=client)
    thread.start()
    started.wait(120)
    states = []
    watcher_stop = threading.Event()

    def watch():
        while not watcher_stop.is_set():
            p = show("ActiveState", "StatusText")
            states.append((p["ActiveState"], p["StatusText"]))
            time.sleep(0.1)

    watcher = threading.Thread(target=watch)
    watcher.start()
    t0 = time.monotonic()
    stop = subprocess.run(["systemctl", "stop", UNIT], capture_output=True, text=True)
    R["stop_s"] = round(time.monotonic() - t0, 1)
    thread.join(60)
    watcher_stop.set()
    watcher.join()
    props = show("ActiveState", "Result", "ExecMainStatus")
    R.update(stop_rc=stop.returncode, stop_result=props["Result"], stop_state=props["ActiveState"],
             exec_main_status=props["ExecMainStatus"],
             stream_done="data: [DONE]" in chunks,
             stream_errors=[c for c in chunks if c.startswith("error")],
             stop_states=sorted(set(states)))


def main():
    for name, phase in (("start", phase_start), ("sandbox", phase_sandbox),
                        ("engine_kill", phase_engine_kill), ("drain", phase_drain)):
        try:
            phase()
            R["phases"].append(name)
        except Exception:  # noqa: BLE001 - reported in result.json
            R["error"] = f"{name}: {traceback.format_exc()}"
            break
        if name == "start" and R.get("start_state") != "active":
            break


try:
    main()
finally:
    with open("/out/result.json", "w") as fh:
        json.dump(R, fh, indent=1)
    journal = subprocess.run(["journalctl", "-b", "--no-pager", "-o", "short-monotonic"],
                             capture_output=True, text=True).stdout
    with open("/out/journal.txt", "w") as fh:
        fh.write(journal)
    subprocess.run(["systemctl", "poweroff", "--no-block"])
