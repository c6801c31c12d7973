#!/usr/bin/env bash
# Checks that no test waits on Swift's cooperative pool (docs/TESTING.md, "Blocking calls
# on the cooperative pool"): scripts/test.sh and CI run on 2 cores, so the pool has 2
# threads, and a test that sleeps, waits for a child, a semaphore or a pipe there holds
# one of them; two such tests stall every in-process server and timer of the run. Swift
# Testing calls a synchronous test function from an async thunk, so it counts too.
# A grep, so it sees calls, not threads: a blocking call is allowed in the files below
# (each says why), or on a line marked `// blocking: WHY` (a moment, or a thread of its own).
#   scripts/check-test-waits.sh    exits 1 and lists each file:line that waits
set -euo pipefail
cd "$(dirname "$0")/.."
declare -A allowed=(
    [Tests/TestSupport/ChildProcess.swift]="the reaper thread's waitpid; waitUntilExit for threads of their own (async code awaits exited())"
    [Tests/TestSupport/CLI.swift]="finishBlocking runs on threads of its own (finish, terminateInBackground)"
    [Tests/TestSupport/Repo.swift]="runOnThisThread is run's body, on its own thread (LocalHTTP.onThread)"
    [Tests/TestSupport/FileHandle+Interrupts.swift]="the pipe reads themselves"
    [Tests/TestSupport/OfflineServerProcess.swift]="the first line and its bounded wait are read inside LocalHTTP.onThread"
    [Tests/TestSupport/Nginx.swift]="stop() waits on a thread of its own"
    [Tests/TestSupport/ScriptedServer.swift]="scripted pauses, on the server's connection threads"
    [Tests/TestSupport/TrickleServer.swift]="scripted pauses, on the server's connection threads"
    [Tests/TestSupport/ReportCollector.swift]="scripted pauses, on the collector's connection threads"
    [Tests/OfflineServeTests/RecordingOrigin.swift]="wait() blocks its caller, which is a thread of its own (LocalHTTP.onThread)"
    [Tests/OfflineServeTests/WebKitView.swift]="its reads run on threads of their own"
    [Tests/OfflineServeTests/ServeHostileClientTests.swift]="slow clients: pauses and reads inside LocalHTTP.onThread"
    [Tests/OfflineServeTests/OriginProxyTests.swift]="slow clients: pauses and reads inside LocalHTTP.onThread"
    [Tests/OfflineServeTests/LocalServerTests.swift]="the serve line is read inside LocalHTTP.onThread"
    [Tests/OfflineServerTests/ReferenceServerTests.swift]="the listening line is read inside LocalHTTP.onThread"
    [Tests/OfflineServerTests/FleetReportFleetTests.swift]="a hundred devices run inside LocalHTTP.onThread"
    [Tests/OfflineServerTests/FleetAutoHaltTests.swift]="the fleet's syncs are waited for inside LocalHTTP.onThread"
    [Tests/EndToEndTests/LifecycleCLITests.swift]="availableLine reads inside LocalHTTP.onThread"
    [Tests/EndToEndTests/SyncInterruptionTests.swift]="its polls run on detached threads"
    [Tests/OfflineAgentTests/BlockingWorkTests.swift]="holds pool threads on purpose: it checks that extraction leaves the pool"
    [Tests/OfflineAgentTests/FileDescriptorTests.swift]="the reader waits for its own writer thread, which needs no pool thread; bounded"
    [Tests/OfflineAgentTests/ChildProcessTests.swift]="tests ChildProcess's blocking API itself, on sh -c one-liners"
)
pattern='usleep\(|Thread\.sleep\(|(^|[^.[:alnum:]_])sleep\(|waitUntilExit\(\)|readDataToEndOfFile|\.readToEnd\(\)|readAllRetryingInterrupts\(|readSomeRetryingInterrupts\(|finishBlocking\(|runOnThisThread\(|(^|[^.[:alnum:]_])waitpid\('
found=0
while IFS= read -r hit; do
    file=${hit%%:*}
    [[ -n ${allowed[$file]+set} ]] && continue
    [[ $hit == *"// blocking: "* ]] && continue
    [[ $hit == *"LocalHTTP.onThread {"* ]] && continue  # the call is inside it
    # A semaphore's or condition's wait, unless awaited (PublishProcess.wait is async).
    if [[ $hit =~ \.wait\( && ! $hit =~ $pattern ]]; then
        [[ $hit == *await* ]] && continue
    fi
    echo "$hit"
    found=1
done < <(grep -rnE "$pattern|\.wait\(" Tests --include='*.swift')
for file in "${!allowed[@]}"; do
    [[ -f $file ]] || { echo "check-test-waits: $file is allowed but gone (update the list)" >&2; exit 2; }
done
if ((found)); then
    echo "check-test-waits: the lines above wait on the calling thread; in async code (a test, or code it calls) await instead:" \
        "Task.sleep, ChildProcess.exited(), CLI.run/finish, run(...), or the blocking part in LocalHTTP.onThread;" \
        "if it is a moment or already on a thread of its own, say so with // blocking: WHY" >&2
    exit 1
fi
echo "check-test-waits: no test waits on the cooperative pool (${#allowed[@]} files allowed, each saying why)"
