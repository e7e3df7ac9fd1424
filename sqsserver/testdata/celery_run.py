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
    # And acked: the worker deletes each message (asynchronously, on its
    # own connection); wait until the queue is empty before stopping it,
    # or a warm shutdown hands an unacked one back, as it should.
    import boto3
    sqs = boto3.client("sqs", endpoint_url=os.environ["LEASEBUS_SQS"], region_name="us-east-1",
                       aws_access_key_id="x", aws_secret_access_key="x")
    q = sqs.get_queue_url(QueueName="jobs")["QueueUrl"]
    left = None
    while time.monotonic() < deadline:
        a = sqs.get_queue_attributes(QueueUrl=q, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        left = int(a["ApproximateNumberOfMessages"]) + int(a["ApproximateNumberOfMessagesNotVisible"])
        if left == 0:
            break
        time.sleep(0.05)
    assert left == 0, f"{left} messages not acked"
finally:
    # Every task has run and been acked; how the worker stops is not what
    # is tested: a warm shutdown, and a kill if it lingers in its loop.
    worker.send_signal(signal.SIGTERM)
    try:
        worker.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
print("ok")
