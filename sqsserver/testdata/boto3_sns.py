"""Debian's boto3 (SNS and SQS over the query protocol) against
leasebus-sqs: a topic fanned out to two queues with different filter
policies, one enveloped and one raw, and a FIFO topic to a FIFO queue.
Run by TestBoto3SNS with the server's URL; prints "ok"."""
import json
import sys

import boto3

url = sys.argv[1]
kw = dict(endpoint_url=url, region_name="us-east-1", aws_access_key_id="AKIDBOTO", aws_secret_access_key="secret")
sns = boto3.client("sns", **kw)
sqs = boto3.client("sqs", **kw)


def queue(name, attrs=None):
    u = sqs.create_queue(QueueName=name, Attributes=attrs or {})["QueueUrl"]
    return u, sqs.get_queue_attributes(QueueUrl=u, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def drain(u):
    got = []
    while True:
        ms = sqs.receive_message(QueueUrl=u, MaxNumberOfMessages=10, MessageAttributeNames=["All"]).get("Messages", [])
        if not ms:
            return got
        for m in ms:
            got.append(m)
            sqs.delete_message(QueueUrl=u, ReceiptHandle=m["ReceiptHandle"])


topic = sns.create_topic(Name="orders")["TopicArn"]
eu, eu_arn = queue("eu")
big, big_arn = queue("big")
sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=eu_arn,
              Attributes={"FilterPolicy": json.dumps({"region": [{"prefix": "eu-"}], "kind": [{"anything-but": "test"}]})})
sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=big_arn, ReturnSubscriptionArn=True, Attributes={
    "RawMessageDelivery": "true", "FilterPolicyScope": "MessageBody",
    "FilterPolicy": json.dumps({"amount": [{"numeric": [">=", 100]}]})})

first = sns.publish(TopicArn=topic, Message=json.dumps({"amount": 150}), Subject="new order",
                    MessageAttributes={"region": {"DataType": "String", "StringValue": "eu-west-1"},
                                       "kind": {"DataType": "String", "StringValue": "retail"}})["MessageId"]
sns.publish(TopicArn=topic, Message=json.dumps({"amount": 5}),
            MessageAttributes={"region": {"DataType": "String", "StringValue": "us-east-1"}})
batch = sns.publish_batch(TopicArn=topic, PublishBatchRequestEntries=[
    {"Id": "1", "Message": json.dumps({"amount": 900}), "MessageAttributes": {"kind": {"DataType": "String", "StringValue": "test"}}},
    {"Id": "2", "Message": "plain", "MessageAttributes": {"region": {"DataType": "String", "StringValue": "eu-north-1"},
                                                          "kind": {"DataType": "String", "StringValue": "retail"}}},
    # anything-but needs the attribute there: without kind, eu does not get it
    {"Id": "3", "Message": "no kind", "MessageAttributes": {"region": {"DataType": "String", "StringValue": "eu-north-1"}}},
])
assert [e["Id"] for e in batch["Successful"]] == ["1", "2", "3"] and not batch["Failed"], batch

got = drain(eu)
assert len(got) == 2, got
env = json.loads(got[0]["Body"])
assert env["Type"] == "Notification" and env["MessageId"] == first and env["TopicArn"] == topic, env
assert env["Subject"] == "new order" and env["Message"] == json.dumps({"amount": 150}), env
assert env["MessageAttributes"]["region"] == {"Type": "String", "Value": "eu-west-1"}, env
for field in ("Timestamp", "SignatureVersion", "Signature", "SigningCertURL", "UnsubscribeURL"):
    assert env[field], field
assert "Subject" not in json.loads(got[1]["Body"])

raw = drain(big)
assert sorted(m["Body"] for m in raw) == [json.dumps({"amount": 150}), json.dumps({"amount": 900})], raw
assert {m["Body"]: m.get("MessageAttributes") for m in raw}[json.dumps({"amount": 150})]["region"]["StringValue"] == "eu-west-1"

fifo = sns.create_topic(Name="jobs.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "true"})["TopicArn"]
fq, fq_arn = queue("jobs.fifo", {"FifoQueue": "true"})
sns.subscribe(TopicArn=fifo, Protocol="sqs", Endpoint=fq_arn, Attributes={"RawMessageDelivery": "true"})
for body in ["a", "b", "a"]:
    out = sns.publish(TopicArn=fifo, Message=body, MessageGroupId="g")
    assert out["SequenceNumber"], out
assert [m["Body"] for m in drain(fq)] == ["a", "b"]

try:
    sns.get_topic_attributes(TopicArn=topic + "-gone")
    raise AssertionError("no error for a missing topic")
except sns.exceptions.NotFoundException:
    pass
print("ok")
