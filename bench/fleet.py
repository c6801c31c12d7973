#!/usr/bin/env python3
"""offline-server's fleet side, measured (bench/README.md, "fleet"):

1. POST /report ingestion, SQLite and PostgreSQL side by side: wrk -t2 -cC -dS with
   bench/report.lua (batches of 50 unique events) against a release offline-server on a
   fresh database of each kind, open collector (ingest.*).
   Then with per-device credentials on (--report-token --require-enrolment, the default
   per-device rate limit raised past what wrk sends so no request is refused): 64 devices
   enrolled through POST /enrol, 64 connections, each request one device's batch of 10
   events under its own `Authorization: Device ID:HEX` (ingest_enrolled.*): one instance
   on SQLite, and two instances sharing one PostgreSQL database and one collector secret,
   32 devices each, both loaded at once (the aggregate is the sum of the two).
2. Start time, /stats?app=bench and /dashboard?app=bench latency with 10^5 and 10^6
   stored events (filled straight into the database's events table by SQL, not HTTP:
   10 000 devices, VERSIONS versions (default 10 000) in turn over 7 days, updates,
   failures, rollbacks and usage). The running sums are dropped, so the first start
   fills them from the events (start_with_backfill_ms, once per database); the second
   start is an ordinary one (start_ms: from exec to the listening line). Latencies are
   the median of RUNS requests after one warm-up, against the second server.
3. The time from the report that trips --auto-halt to the halted manifest on disk:
   a staged version, 19 installs from devices in the stage, then one batch of failures
   that trips failure-rate>10%; measured from just before that POST until state.json
   reads stage 0 (polled every millisecond), RUNS times, median.

Usage: bench/fleet.py [--server PATH] [--publisher PATH] [--seconds 10] [--sizes 100000,1000000]
                      [--versions 10000] [--runs 9] [--postgres URL] [--out bench/fleet-results.txt]
PostgreSQL: --postgres, else $OFFLINE_AGENT_TEST_POSTGRES_URL, else scripts/postgres-test.sh.
"""
import argparse, hashlib, json, os, random, re, shutil, sqlite3, statistics, subprocess, sys, tempfile, time, urllib.request, uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(*args):
    print("==", *args, file=sys.stderr, flush=True)


def psql(url, sql, stdin=None):
    subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql] if stdin is None else
                   ["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt", "-f", "-"],
                   input=stdin, text=True, check=True, stdout=subprocess.DEVNULL)


class Server:
    """A release offline-server on a port of its choosing; stopped with SIGTERM."""

    def __init__(self, binary, publish, db, extra=(), access=("--open-collector",)):
        self.process = subprocess.Popen(
            [binary, "--dir", publish, "--port", "0", *access, "--reports-db", db, "--log-level", "warning", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline()
        match = re.match(r"listening on .*:(\d+)", line)
        if not match:
            self.process.kill()
            raise SystemExit(f"offline-server did not start: {line!r}")
        self.base = f"http://127.0.0.1:{match.group(1)}"

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def publish(publisher, out, app, version, source, key, stage=None):
    args = [publisher, "publish", "--app", app, "--version", version, "--source", source, "--out", out, "--key", key,
            "--whitelist", f"https://h5.example.com/{app}/"]
    if stage is not None:
        args += ["--stage", str(stage)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def wrk(server, seconds, connections, threads=2, env=None):
    """Starts wrk with bench/report.lua against server's /report."""
    return subprocess.Popen(["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "-s", f"{ROOT}/bench/report.lua",
                             server.base + "/report"], env={**os.environ, "RUN_ID": uuid.uuid4().hex[:8], **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ingest(server, seconds, connections):
    return wrk_result(wrk(server, seconds, connections))


def wrk_result(process):
    out, err = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"wrk failed: {err}")
    fields = dict(re.findall(r"(\w+)=(\d+)", re.search(r"^REPORT .*$", out, re.M).group(0)))
    if int(fields["errors"]):
        raise SystemExit(f"ingest: {fields['errors']} requests failed")
    seconds_taken = int(fields["duration_us"]) / 1e6
    events = int(fields["requests"]) * int(fields["events_per_request"])
    return events / seconds_taken, int(fields["p50_us"]) / 1000, int(fields["p99_us"]) / 1000


TOKEN = "bench-fleet-token"
# Enrolled devices' access: credentials only, and a per-device limit no wrk run reaches
# (the default 60/60 would answer most of a benchmark's requests 429: it bounds a device,
# not the collector).
ENROLLED = ("--report-token", TOKEN, "--require-enrolment", "--device-rate-limit", "1000000/1000000")


def enrol(base, devices):
    """POST /enrol for each device with the fleet token; lines `ID:HEX` for report.lua."""
    lines = []
    for device in devices:
        request = urllib.request.Request(base + "/enrol", json.dumps({"device": device}).encode(),
                                         {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=60) as response:
            lines.append(f"{device}:{json.load(response)['credential']}")
    return "\n".join(lines) + "\n"


def ingest_enrolled(args, work, dbs):
    """Events/s and p99 over len(dbs) instances loaded at once, 64 enrolled devices split between them."""
    access = (*ENROLLED, "--collector-secret", f"{work}/collector-secret")
    servers = []
    try:
        for db in dbs:
            servers.append(Server(args.server, f"{work}/publish", db, access=access))
        devices = [f"bench-enrolled-{i:02d}" for i in range(64)]
        share = len(devices) // len(servers)
        runs = []
        for index, server in enumerate(servers):
            path = f"{work}/credentials-{index}"
            with open(path, "w") as f:
                f.write(enrol(server.base, devices[index * share:(index + 1) * share]))
            runs.append(wrk(server, args.seconds, share, threads=2 if len(servers) == 1 else 1,
                            env={"CREDENTIALS": path, "EVENTS": "10"}))
        results = [wrk_result(run) for run in runs]
    finally:
        for server in servers:
            server.stop()
    return sum(r[0] for r in results), max(r[2] for r in results)


def rows(n, versions, seed=7):
    """n events of app `bench` in the stores' column order (without seq): the fleet moves
    through `versions` versions in turn (1.0.0, 1.0.1, ...)."""
    rng = random.Random(seed)
    now = int(time.time() * 1000)
    start = now - 7 * 86400 * 1000
    for i in range(n):
        device = f"dev-{rng.randrange(10000):05d}"
        at = start + (now - start) * i // n
        step = i * versions // n
        version = f"1.{step // 100}.{step % 100}"
        before = f"1.{(step - 1) // 100}.{(step - 1) % 100}" if step else version
        roll = rng.random()
        if roll < 0.70:
            kind, code, hits, prev = "updated", None, None, None
        elif roll < 0.80:
            kind, code, hits, prev = "failed", rng.choice(["network", "hash-mismatch", "disk-full"]), None, None
        elif roll < 0.82:
            kind, code, hits, prev = "rolled-back", None, None, version
        else:
            kind, code, hits, prev = "usage", None, rng.randrange(100), None
        iso = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at / 1000))
        yield (f"fill{i:09d}", iso, at, device, "bench", kind, version if kind != "rolled-back" else before,
               prev, "patch" if kind == "updated" else None, 18000, 900000 if kind == "updated" else None, 800,
               code, None, hits, 900 if kind == "usage" else None, at)


COLUMNS = ("id, time, timeMillis, device, app, event, version, previousVersion, via, bytes, fullSize, durationMs, "
           "errorCode, message, offlineHits, periodSeconds, receivedMillis")


# The running sums /stats and /metrics read (ReportRollup, ReportCounters). A fill writes
# events only and drops these with their migrations' records, so the server's first start
# fills them from the events (v3, v4, v6; v7 indexes the moves anew).
SUMS = ("version_totals", "failure_causes", "fallback_totals", "devices", "version_moves", "report_counters")
REFILLED = "('v3', 'v4', 'v6', 'v7')"


def fill_sqlite(path, n, versions):
    db = sqlite3.connect(path)
    db.execute("DELETE FROM fallbacks")
    db.execute("DELETE FROM events")
    for table in SUMS:
        db.execute(f"DROP TABLE IF EXISTS {table}")
    db.execute(f"DELETE FROM grdb_migrations WHERE identifier IN {REFILLED}")
    db.executemany(f"INSERT INTO events ({COLUMNS}) VALUES ({','.join('?' * 17)})", rows(n, versions))
    db.commit()
    db.close()


def fill_postgres(url, n, versions):
    psql(url, "TRUNCATE fallbacks, events")
    psql(url, "".join(f"DROP TABLE IF EXISTS {table};" for table in SUMS) +
         f"DELETE FROM offline_server_migrations WHERE name IN {REFILLED}")
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        for row in rows(n, versions):
            f.write(",".join("" if v is None else str(v) for v in row) + "\n")
        name = f.name
    try:
        with open(name) as data:
            subprocess.run(["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt", "-c",
                            f"\\copy events ({COLUMNS}) FROM STDIN WITH (FORMAT csv)"], stdin=data, check=True)
        psql(url, "ANALYZE events")
    finally:
        os.unlink(name)


def drop_database(url, name):
    """Drops the bench's database once the servers are gone. Not WITH (FORCE): that must end
    every session, and an autovacuum worker (the fill's \\copy wakes one) belongs to a role
    the test role may not signal; a plain DROP stops autovacuum itself. Retried for 30 s."""
    for _ in range(30):
        try:
            psql(url, f"DROP DATABASE IF EXISTS {name}")
            return
        except subprocess.CalledProcessError:
            time.sleep(1)
    log(f"could not drop database {name}: drop it by hand")


def latency(url, runs):
    def once():
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
        return (time.perf_counter() - started) * 1000
    once()
    return statistics.median(once() for _ in range(runs))


def bucket(device, app):
    return 1 + int.from_bytes(hashlib.sha256(f"{device}:{app}".encode()).digest()[:4], "big") % 100


def post(base, events):
    body = json.dumps({"events": events}).encode()
    request = urllib.request.Request(base + "/report", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def event(kind, device, app, version):
    return {"id": uuid.uuid4().hex, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": device,
            "app": app, "event": kind, "version": version, "bytes": 0, "durationMs": 5}


def halt_time(args, work, db, key, run):
    app = f"halt{run}"
    publish(args.publisher, f"{work}/publish", app, "1.0.0", f"{ROOT}/fixtures/sample-app/1.0.0", key)
    publish(args.publisher, f"{work}/publish", app, "2.0.0", f"{ROOT}/fixtures/sample-app/1.1.0", key, stage=50)
    inside = [d for d in (f"{app}-dev-{i}" for i in range(2000)) if bucket(d, app) <= 50][:22]
    server = Server(args.server, f"{work}/publish", db,
                    ["--key", key, "--auto-halt", "failure-rate>10%,min-devices=20,window=1h"])
    try:
        post(server.base, [event("updated", d, app, "2.0.0") for d in inside[:19]])
        state = f"{work}/publish/{app}/state.json"
        started = time.perf_counter()
        post(server.base, [event("failed", d, app, "2.0.0") for d in inside[19:22]])
        deadline = started + 10
        while time.perf_counter() < deadline:
            with open(state) as f:
                if json.load(f).get("stage") == 0:
                    return (time.perf_counter() - started) * 1000
            time.sleep(0.001)
        raise SystemExit(f"halt: {app} was not halted within 10 s")
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=f"{ROOT}/.build/release/offline-server")
    parser.add_argument("--publisher", default=f"{ROOT}/.build/release/offline-publish")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--versions", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--postgres", default=os.environ.get("OFFLINE_AGENT_TEST_POSTGRES_URL"))
    parser.add_argument("--out", default=f"{ROOT}/bench/fleet-results.txt")
    args = parser.parse_args()
    for tool in (args.server, args.publisher):
        if not os.access(tool, os.X_OK):
            raise SystemExit(f"missing {tool}: scripts/build-release.sh offline-server offline-publish")
    if shutil.which("wrk") is None:
        raise SystemExit("missing wrk (apt-get install wrk)")
    server_url = args.postgres or subprocess.run([f"{ROOT}/scripts/postgres-test.sh"], check=True, capture_output=True,
                                                 text=True).stdout.strip()
    work = tempfile.mkdtemp(prefix="bench-fleet-")
    results = []
    try:
        key = f"{work}/signing.key"
        subprocess.run([args.publisher, "keygen", "--out", key], check=True, stdout=subprocess.DEVNULL)
        publish(args.publisher, f"{work}/publish", "bench", "2.0.0", f"{ROOT}/fixtures/sample-app/1.0.0", key)
        pg_name = f"bench_fleet_{uuid.uuid4().hex[:8]}"
        psql(server_url, f"CREATE DATABASE {pg_name}")
        pg_url = server_url.rsplit("/", 1)[0] + "/" + pg_name
        stores = {"sqlite": f"{work}/reports.sqlite", "postgres": pg_url}
        try:
            for name, db in stores.items():
                server = Server(args.server, f"{work}/publish", db)
                try:
                    rate, p50, p99 = ingest(server, args.seconds, args.connections)
                finally:
                    server.stop()
                log(f"ingest {name}: {rate:.0f} events/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms")
                results += [f"fleet.ingest.{name}.events_per_s={rate:.0f}", f"fleet.ingest.{name}.p99_ms={p99:.1f}"]
            for name, dbs in (("sqlite", [f"{work}/enrolled.sqlite"]), ("postgres_2_instances", [pg_url, pg_url])):
                if name.startswith("postgres"):
                    psql(pg_url, "TRUNCATE fallbacks, events")
                rate, p99 = ingest_enrolled(args, work, dbs)
                log(f"ingest enrolled {name}: {rate:.0f} events/s, p99 {p99:.1f} ms")
                results += [f"fleet.ingest_enrolled.{name}.events_per_s={rate:.0f}",
                            f"fleet.ingest_enrolled.{name}.p99_ms={p99:.1f}"]
            for size in (int(s) for s in args.sizes.split(",")):
                for name, db in stores.items():
                    log(f"filling {name} with {size} events, {args.versions} versions")
                    fill_sqlite(db, size, args.versions) if name == "sqlite" else fill_postgres(db, size, args.versions)
                    started = time.perf_counter()
                    first = Server(args.server, f"{work}/publish", db)
                    backfill = (time.perf_counter() - started) * 1000
                    first.stop()
                    started = time.perf_counter()
                    server = Server(args.server, f"{work}/publish", db)
                    start = (time.perf_counter() - started) * 1000
                    log(f"{name} {size} events: first start (backfill) {backfill:.0f} ms, start {start:.0f} ms")
                    results += [f"fleet.start_with_backfill_ms.{name}.{size}={backfill:.0f}", f"fleet.start_ms.{name}.{size}={start:.0f}"]
                    try:
                        stats = latency(server.base + "/stats?app=bench", args.runs)
                        dashboard = latency(server.base + "/dashboard?app=bench", args.runs)
                    finally:
                        server.stop()
                    log(f"{name} {size} events: /stats {stats:.1f} ms, /dashboard {dashboard:.1f} ms")
                    results += [f"fleet.stats_ms.{name}.{size}={stats:.1f}", f"fleet.dashboard_ms.{name}.{size}={dashboard:.1f}"]
            for name, db in stores.items():
                times = [halt_time(args, work, db, key, f"{name}{run}") for run in range(5)]
                log(f"halt {name}: median {statistics.median(times):.1f} ms (runs: {', '.join(f'{t:.1f}' for t in times)})")
                results.append(f"fleet.halt_ms.{name}={statistics.median(times):.1f}")
        finally:
            drop_database(server_url, pg_name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # The load average says how much the machine was shared: these figures move with it.
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    header = f"# bench/fleet.py on {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, load average {load}"
    with open(args.out, "w") as f:
        f.write("\n".join([header] + results) + "\n")
    print("\n".join(results))


if __name__ == "__main__":
    main()
