"""Debian's boto3 (the query protocol) against leasebus-sqs, on its mock
clock. Run by TestBoto3QueryProtocol with the server's URL; prints "ok"."""
import sys
import urllib.request

import boto3

url = sys.argv[1]
c = boto3.client("sqs", endpoint_url=url, region_name="us-east-1",
                 aws_access_key_id="AKIDBOTO", aws_secret_access_key="secret")
assert c.meta.service_model.protocol == "query", c.meta.service_model.protocol


def advance(d):
    """Moves the server's mock clock, as a Python test does."""
    req = urllib.request.Request(url + "/leasebus/clock?advance=" + d, method="POST")
    urllib.request.urlopen(req).read()


q = c.create_queue(QueueName="jobs", Attributes={"VisibilityTimeout": "30"}, tags={"team": "a"})["QueueUrl"]
assert q == url + "/000000000000/jobs", q
assert c.get_queue_url(QueueName="jobs")["QueueUrl"] == q
assert c.list_queues(QueueNamePrefix="jo")["QueueUrls"] == [q]

# botocore checks MD5OfMessageBody and MD5OfMessageAttributes itself.
sent = c.send_message(QueueUrl=q, MessageBody="resize <b>cat</b> & dog", MessageAttributes={
    "size": {"DataType": "Number", "StringValue": "42"},
    "raw": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
})
batch = c.send_message_batch(QueueUrl=q, Entries=[
    {"Id": "a", "MessageBody": "x"},
    {"Id": "b", "MessageBody": "y", "DelaySeconds": 5},
])
assert [e["Id"] for e in batch["Successful"]] == ["a", "b"], batch
assert not batch.get("Failed"), batch

got = c.receive_message(QueueUrl=q, MaxNumberOfMessages=10, AttributeNames=["All"], MessageAttributeNames=["All"])["Messages"]
assert [m["Body"] for m in got] == ["resize <b>cat</b> & dog", "x"], got
m = got[0]
assert m["MessageId"] == sent["MessageId"]
assert m["Attributes"]["ApproximateReceiveCount"] == "1"
assert m["Attributes"]["SenderId"] == "AKIDBOTO"
assert m["MessageAttributes"]["size"] == {"DataType": "Number", "StringValue": "42"}, m["MessageAttributes"]
assert m["MessageAttributes"]["raw"] == {"DataType": "Binary", "BinaryValue": b"\x00\x01"}

# Not deleted: back after the visibility timeout, on the moved clock.
advance("30s")
again = c.receive_message(QueueUrl=q, MaxNumberOfMessages=10, AttributeNames=["All"])["Messages"]
assert sorted(x["Body"] for x in again) == ["resize <b>cat</b> & dog", "x", "y"], again
assert {x["Body"]: x["Attributes"]["ApproximateReceiveCount"] for x in again}["x"] == "2"

handles = {x["Body"]: x["ReceiptHandle"] for x in again}
c.change_message_visibility(QueueUrl=q, ReceiptHandle=handles["y"], VisibilityTimeout=60)
vis = c.change_message_visibility_batch(QueueUrl=q, Entries=[
    {"Id": "1", "ReceiptHandle": handles["x"], "VisibilityTimeout": 60},
    {"Id": "2", "ReceiptHandle": "bogus", "VisibilityTimeout": 60},
])
assert [e["Id"] for e in vis["Successful"]] == ["1"] and vis["Failed"][0]["Code"] == "ReceiptHandleIsInvalid", vis
c.delete_message(QueueUrl=q, ReceiptHandle=handles["resize <b>cat</b> & dog"])
d = c.delete_message_batch(QueueUrl=q, Entries=[{"Id": "x", "ReceiptHandle": handles["x"]}, {"Id": "y", "ReceiptHandle": handles["y"]}])
assert len(d["Successful"]) == 2, d

attrs = c.get_queue_attributes(QueueUrl=q, AttributeNames=["All"])["Attributes"]
assert attrs["VisibilityTimeout"] == "30" and attrs["ApproximateNumberOfMessages"] == "0", attrs
c.set_queue_attributes(QueueUrl=q, Attributes={"DelaySeconds": "1"})
assert c.get_queue_attributes(QueueUrl=q, AttributeNames=["DelaySeconds"])["Attributes"] == {"DelaySeconds": "1"}
c.tag_queue(QueueUrl=q, Tags={"env": "test"})
c.untag_queue(QueueUrl=q, TagKeys=["team"])
assert c.list_queue_tags(QueueUrl=q)["Tags"] == {"env": "test"}

dlq = c.create_queue(QueueName="jobs-dlq")["QueueUrl"]
dlq_arn = c.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
c.set_queue_attributes(QueueUrl=q, Attributes={"RedrivePolicy": '{"deadLetterTargetArn":"%s","maxReceiveCount":"1"}' % dlq_arn})
assert c.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [q]

c.send_message(QueueUrl=q, MessageBody="z")
c.purge_queue(QueueUrl=q)
try:
    c.get_queue_url(QueueName="missing")
    raise AssertionError("no error for a missing queue")
except c.exceptions.QueueDoesNotExist as e:
    assert e.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 400
c.delete_queue(QueueUrl=q)
assert c.list_queues().get("QueueUrls") == [dlq]
print("ok")
