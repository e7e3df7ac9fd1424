package sqsserver

// The shapes of SNS's query protocol (the AWS SDKs' SNS model names them),
// read from the form and written as XML by the sns dialect (querywire.go).

type snsTag struct {
	Key   *string `json:"Key"`
	Value *string `json:"Value"`
}

type snsAttributeValue struct {
	DataType    string  `json:"DataType"`
	StringValue *string `json:"StringValue,omitempty"`
	BinaryValue []byte  `json:"BinaryValue,omitempty"`
}

type createTopicInput struct {
	Name       *string           `json:"Name"`
	Attributes map[string]string `json:"Attributes"`
	Tags       []snsTag          `json:"Tags"`
}

type topicARNOutput struct {
	TopicArn string `json:"TopicArn"`
}

type topicInput struct {
	TopicArn *string `json:"TopicArn"`
}

type listInput struct {
	NextToken string `json:"NextToken"`
}

type snsTopicEntry struct {
	TopicArn string `json:"TopicArn"`
}

type listTopicsOutput struct {
	Topics    []snsTopicEntry `json:"Topics"`
	NextToken string          `json:"NextToken,omitempty"`
}

type snsAttributesOutput struct {
	Attributes map[string]string `json:"Attributes"`
}

type setAttributeInput struct {
	TopicArn        *string `json:"TopicArn"`
	SubscriptionArn *string `json:"SubscriptionArn"`
	AttributeName   *string `json:"AttributeName"`
	AttributeValue  *string `json:"AttributeValue"`
}

type subscribeInput struct {
	TopicArn              *string           `json:"TopicArn"`
	Protocol              *string           `json:"Protocol"`
	Endpoint              *string           `json:"Endpoint"`
	Attributes            map[string]string `json:"Attributes"`
	ReturnSubscriptionArn bool              `json:"ReturnSubscriptionArn"`
}

type subscriptionARNOutput struct {
	SubscriptionArn string `json:"SubscriptionArn"`
}

type subscriptionInput struct {
	SubscriptionArn *string `json:"SubscriptionArn"`
}

type listByTopicInput struct {
	TopicArn  *string `json:"TopicArn"`
	NextToken string  `json:"NextToken"`
}

type snsSubscriptionEntry struct {
	SubscriptionArn string `json:"SubscriptionArn"`
	Owner           string `json:"Owner"`
	Protocol        string `json:"Protocol"`
	Endpoint        string `json:"Endpoint"`
	TopicArn        string `json:"TopicArn"`
}

type listSubscriptionsOutput struct {
	Subscriptions []snsSubscriptionEntry `json:"Subscriptions"`
	NextToken     string                 `json:"NextToken,omitempty"`
}

type publishInput struct {
	TopicArn               *string                      `json:"TopicArn"`
	TargetArn              *string                      `json:"TargetArn"`
	PhoneNumber            *string                      `json:"PhoneNumber"`
	Message                *string                      `json:"Message"`
	Subject                *string                      `json:"Subject"`
	MessageStructure       *string                      `json:"MessageStructure"`
	MessageAttributes      map[string]snsAttributeValue `json:"MessageAttributes"`
	MessageDeduplicationID *string                      `json:"MessageDeduplicationId"`
	MessageGroupID         *string                      `json:"MessageGroupId"`
}

type publishOutput struct {
	MessageID      string `json:"MessageId"`
	SequenceNumber string `json:"SequenceNumber,omitempty"`
}

type publishBatchEntry struct {
	ID                     *string                      `json:"Id"`
	Message                *string                      `json:"Message"`
	Subject                *string                      `json:"Subject"`
	MessageStructure       *string                      `json:"MessageStructure"`
	MessageAttributes      map[string]snsAttributeValue `json:"MessageAttributes"`
	MessageDeduplicationID *string                      `json:"MessageDeduplicationId"`
	MessageGroupID         *string                      `json:"MessageGroupId"`
}

type publishBatchInput struct {
	TopicArn *string             `json:"TopicArn"`
	Entries  []publishBatchEntry `json:"PublishBatchRequestEntries"`
}

type publishBatchResultEntry struct {
	ID string `json:"Id"`
	publishOutput
}

type publishBatchOutput struct {
	Successful []publishBatchResultEntry `json:"Successful"`
	Failed     []batchResultError        `json:"Failed"`
}

type resourceInput struct {
	ResourceArn *string  `json:"ResourceArn"`
	Tags        []snsTag `json:"Tags"`
	TagKeys     []string `json:"TagKeys"`
}

type listTagsOutput struct {
	Tags []snsTag `json:"Tags"`
}
