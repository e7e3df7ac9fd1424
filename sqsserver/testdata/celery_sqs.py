"""A Celery app on kombu's SQS transport, against leasebus-sqs."""
import os
from celery import Celery

url = os.environ["LEASEBUS_SQS"]  # http://127.0.0.1:PORT
host = url.split("://", 1)[1]
app = Celery("leasebus", broker="sqs://AKIDCELERY:secret@" + host)
app.conf.update(
    broker_transport_options={"region": "us-east-1", "is_secure": False, "wait_time_seconds": 1, "polling_interval": 0.1,
                              "visibility_timeout": 30},
    task_default_queue="jobs",
    worker_hijack_root_logger=False,
)

@app.task(name="add")
def add(x, y):
    with open(os.environ["LEASEBUS_RESULTS"], "a") as f:
        f.write(f"{x}+{y}={x + y}\n")
    return x + y
