"""Runs a real Celery worker (kombu's SQS transport: boto3 to create the
queue, its own pycurl client for the query protocol) against leasebus-sqs,
sends it tasks and waits for their results. Run by TestCeleryWorker with
LEASEBUS_SQS and LEASEBUS_RESULTS set; prints "ok"."""
import os
import signal
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
from celery_sqs import add  # noqa: E402

results = os.environ["LEASEBUS_RESULTS"]
worker = subprocess.Popen(
    [sys.executable, "-m", "celery", "-A", "celery_sqs", "worker", "--pool=solo", "--without-heartbeat",
     "--without-gossip", "--without-mingle", "-Q", "jobs", "-l", "warning"],
    cwd=here, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
try:
    for i in range(5):
        add.delay(i, 10)
    # The worker's answers are its own: wait for them, bounded so that a
    # worker that never gets its tasks fails the test instead of hanging it.
    want = sorted(f"{i}+10={i + 10}" for i in range(5))
    deadline = time.monotonic() + 60
    got = []
    while time.monotonic() < deadline:
        if os.path.exists(results):
            with open(results) as f:
                got = sorted(line.strip() for line in f if line.strip())
            if len(got) >= len(want):
                break
        time.sleep(0.05)
    assert got == want, (got, want)
finally:
    worker.send_signal(signal.SIGTERM)  # a warm shutdown
    out, _ = worker.communicate(timeout=30)
    if worker.returncode not in (0, -signal.SIGTERM):
        print(out)
        raise SystemExit(f"worker exited {worker.returncode}")
print("ok")
