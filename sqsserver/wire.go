package sqsserver

// The JSON shapes of the SQS protocol, named as the SQS model names them
// (aws-sdk-go-v2's service/sqs schemas are the reference): the JSON member
// names are the model's member names, capitalisation included ("tags" in
// CreateQueue, "queueUrls" in ListDeadLetterSourceQueues). Integers the
// SDK leaves out when zero are pointers here, so that a client that sends
// an explicit 0 (boto3 does) is told apart from one that sends nothing.

type attributeValue struct {
	DataType         string   `json:"DataType,omitempty"`
	StringValue      *string  `json:"StringValue,omitempty"`
	BinaryValue      []byte   `json:"BinaryValue,omitempty"`
	StringListValues []string `json:"StringListValues,omitempty"`
	BinaryListValues [][]byte `json:"BinaryListValues,omitempty"`
}

type createQueueInput struct {
	QueueName  *string           `json:"QueueName"`
	Attributes map[string]string `json:"Attributes"`
	Tags       map[string]string `json:"tags"`
}

type queueURLOutput struct {
	QueueURL string `json:"QueueUrl"`
}

type getQueueURLInput struct {
	QueueName              *string `json:"QueueName"`
	QueueOwnerAWSAccountID string  `json:"QueueOwnerAWSAccountId"`
}

type queueInput struct {
	QueueURL *string `json:"QueueUrl"`
}

type listQueuesInput struct {
	QueueNamePrefix string `json:"QueueNamePrefix"`
	MaxResults      *int   `json:"MaxResults"`
	NextToken       string `json:"NextToken"`
}

type listQueuesOutput struct {
	QueueUrls []string `json:"QueueUrls,omitempty"`
	NextToken string   `json:"NextToken,omitempty"`
}

type listDeadLetterSourceQueuesInput struct {
	QueueURL   *string `json:"QueueUrl"`
	MaxResults *int    `json:"MaxResults"`
	NextToken  string  `json:"NextToken"`
}

type listDeadLetterSourceQueuesOutput struct {
	QueueUrls []string `json:"queueUrls"`
	NextToken string   `json:"NextToken,omitempty"`
}

type getQueueAttributesInput struct {
	QueueURL       *string  `json:"QueueUrl"`
	AttributeNames []string `json:"AttributeNames"`
}

type attributesOutput struct {
	Attributes map[string]string `json:"Attributes,omitempty"`
}

type setQueueAttributesInput struct {
	QueueURL   *string           `json:"QueueUrl"`
	Attributes map[string]string `json:"Attributes"`
}

type tagQueueInput struct {
	QueueURL *string           `json:"QueueUrl"`
	Tags     map[string]string `json:"Tags"`
}

type untagQueueInput struct {
	QueueURL *string  `json:"QueueUrl"`
	TagKeys  []string `json:"TagKeys"`
}

type listQueueTagsOutput struct {
	Tags map[string]string `json:"Tags,omitempty"`
}

type sendMessageInput struct {
	QueueURL                *string                   `json:"QueueUrl"`
	MessageBody             *string                   `json:"MessageBody"`
	DelaySeconds            *int                      `json:"DelaySeconds"`
	MessageAttributes       map[string]attributeValue `json:"MessageAttributes"`
	MessageSystemAttributes map[string]attributeValue `json:"MessageSystemAttributes"`
	MessageDeduplicationID  *string                   `json:"MessageDeduplicationId"`
	MessageGroupID          *string                   `json:"MessageGroupId"`
}

type sendMessageOutput struct {
	MessageID                    string `json:"MessageId"`
	MD5OfMessageBody             string `json:"MD5OfMessageBody"`
	MD5OfMessageAttributes       string `json:"MD5OfMessageAttributes,omitempty"`
	MD5OfMessageSystemAttributes string `json:"MD5OfMessageSystemAttributes,omitempty"`
	SequenceNumber               string `json:"SequenceNumber,omitempty"`
}

type sendMessageBatchEntry struct {
	ID                      *string                   `json:"Id"`
	MessageBody             *string                   `json:"MessageBody"`
	DelaySeconds            *int                      `json:"DelaySeconds"`
	MessageAttributes       map[string]attributeValue `json:"MessageAttributes"`
	MessageSystemAttributes map[string]attributeValue `json:"MessageSystemAttributes"`
	MessageDeduplicationID  *string                   `json:"MessageDeduplicationId"`
	MessageGroupID          *string                   `json:"MessageGroupId"`
}

type sendMessageBatchInput struct {
	QueueURL *string                 `json:"QueueUrl"`
	Entries  []sendMessageBatchEntry `json:"Entries"`
}

type sendMessageBatchResultEntry struct {
	ID string `json:"Id"`
	sendMessageOutput
}

type batchResultError struct {
	ID          string `json:"Id"`
	SenderFault bool   `json:"SenderFault"`
	Code        string `json:"Code"`
	Message     string `json:"Message,omitempty"`
}

type sendMessageBatchOutput struct {
	Successful []sendMessageBatchResultEntry `json:"Successful"`
	Failed     []batchResultError            `json:"Failed"`
}

type receiveMessageInput struct {
	QueueURL                    *string  `json:"QueueUrl"`
	AttributeNames              []string `json:"AttributeNames"`
	MessageSystemAttributeNames []string `json:"MessageSystemAttributeNames"`
	MessageAttributeNames       []string `json:"MessageAttributeNames"`
	MaxNumberOfMessages         *int     `json:"MaxNumberOfMessages"`
	VisibilityTimeout           *int     `json:"VisibilityTimeout"`
	WaitTimeSeconds             *int     `json:"WaitTimeSeconds"`
	ReceiveRequestAttemptID     *string  `json:"ReceiveRequestAttemptId"`
}

type wireMessage struct {
	MessageID              string                    `json:"MessageId"`
	ReceiptHandle          string                    `json:"ReceiptHandle"`
	MD5OfBody              string                    `json:"MD5OfBody"`
	Body                   string                    `json:"Body"`
	Attributes             map[string]string         `json:"Attributes,omitempty"`
	MD5OfMessageAttributes string                    `json:"MD5OfMessageAttributes,omitempty"`
	MessageAttributes      map[string]attributeValue `json:"MessageAttributes,omitempty"`
}

type receiveMessageOutput struct {
	Messages []wireMessage `json:"Messages,omitempty"`
}

type deleteMessageInput struct {
	QueueURL      *string `json:"QueueUrl"`
	ReceiptHandle *string `json:"ReceiptHandle"`
}

type batchEntry struct {
	ID                *string `json:"Id"`
	ReceiptHandle     *string `json:"ReceiptHandle"`
	VisibilityTimeout *int    `json:"VisibilityTimeout"`
}

type batchInput struct {
	QueueURL *string      `json:"QueueUrl"`
	Entries  []batchEntry `json:"Entries"`
}

type batchResultEntry struct {
	ID string `json:"Id"`
}

type batchOutput struct {
	Successful []batchResultEntry `json:"Successful"`
	Failed     []batchResultError `json:"Failed"`
}

type changeVisibilityInput struct {
	QueueURL          *string `json:"QueueUrl"`
	ReceiptHandle     *string `json:"ReceiptHandle"`
	VisibilityTimeout *int    `json:"VisibilityTimeout"`
}

type startMoveTaskInput struct {
	SourceArn                    *string `json:"SourceArn"`
	DestinationArn               *string `json:"DestinationArn"`
	MaxNumberOfMessagesPerSecond *int    `json:"MaxNumberOfMessagesPerSecond"`
}

type startMoveTaskOutput struct {
	TaskHandle string `json:"TaskHandle"`
}

type cancelMoveTaskOutput struct {
	ApproximateNumberOfMessagesMoved int64 `json:"ApproximateNumberOfMessagesMoved"`
}

type cancelMoveTaskInput struct {
	TaskHandle *string `json:"TaskHandle"`
}

type listMoveTasksInput struct {
	SourceArn  *string `json:"SourceArn"`
	MaxResults *int    `json:"MaxResults"`
}

type moveTaskEntry struct {
	TaskHandle                        string `json:"TaskHandle,omitempty"`
	Status                            string `json:"Status"`
	SourceArn                         string `json:"SourceArn"`
	DestinationArn                    string `json:"DestinationArn,omitempty"`
	MaxNumberOfMessagesPerSecond      *int   `json:"MaxNumberOfMessagesPerSecond,omitempty"`
	ApproximateNumberOfMessagesMoved  int64  `json:"ApproximateNumberOfMessagesMoved"`
	ApproximateNumberOfMessagesToMove int64  `json:"ApproximateNumberOfMessagesToMove"`
	FailureReason                     string `json:"FailureReason,omitempty"`
	StartedTimestamp                  int64  `json:"StartedTimestamp"`
}

type listMoveTasksOutput struct {
	Results []moveTaskEntry `json:"Results"`
}
