package sqsserver

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is an SQS error as the server sends it: the error type (its shape
// name in the SQS model, as the SDKs match it), the legacy query-protocol
// code that older clients read, the HTTP status and a message. Every
// request the server refuses is answered with one; Go callers of the
// server's own methods can match them with errors.As.
type Error struct {
	Type      string // the model's shape name: "QueueDoesNotExist"
	QueryCode string // the legacy code: "AWS.SimpleQueueService.NonExistentQueue"
	Status    int    // the HTTP status: 400
	Sender    bool   // the caller's fault (Sender) rather than the server's (Receiver)
	Message   string // what went wrong, as the response's message says it
}

// Error returns "sqsserver: <Type>: <Message>".
func (e *Error) Error() string { return fmt.Sprintf("sqsserver: %s: %s", e.Type, e.Message) }

// Is reports whether target is an *Error of the same type, so that
// errors.Is(err, sqsserver.ErrQueueDoesNotExist) works whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Type == e.Type
}

// errorKind is one of the error types the server answers with.
type errorKind struct {
	typ, query string
	status     int
	sender     bool
}

func (k errorKind) new(format string, args ...any) *Error {
	return &Error{Type: k.typ, QueryCode: k.query, Status: k.status, Sender: k.sender, Message: fmt.Sprintf(format, args...)}
}

// The error types, with the status codes and legacy codes of the SQS model
// (service/sqs's schemas in aws-sdk-go-v2) and, for the common errors that
// are not in the model, those AWS sends.
var (
	kQueueDoesNotExist     = errorKind{"QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", 400, true}
	kQueueNameExists       = errorKind{"QueueNameExists", "QueueAlreadyExists", 400, true}
	kReceiptHandleInvalid  = errorKind{"ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", 404, true}
	kMessageNotInflight    = errorKind{"MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", 400, true}
	kInvalidParameterValue = errorKind{"InvalidParameterValue", "InvalidParameterValue", 400, true}
	kMissingParameter      = errorKind{"MissingParameter", "MissingParameter", 400, true}
	kInvalidAttributeName  = errorKind{"InvalidAttributeName", "InvalidAttributeName", 400, true}
	kInvalidAttributeValue = errorKind{"InvalidAttributeValue", "InvalidAttributeValue", 400, true}
	kInvalidMessage        = errorKind{"InvalidMessageContents", "InvalidMessageContents", 400, true}
	kBatchIDsNotDistinct   = errorKind{"BatchEntryIdsNotDistinct", "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400, true}
	kBatchTooLong          = errorKind{"BatchRequestTooLong", "AWS.SimpleQueueService.BatchRequestTooLong", 400, true}
	kEmptyBatch            = errorKind{"EmptyBatchRequest", "AWS.SimpleQueueService.EmptyBatchRequest", 400, true}
	kInvalidBatchEntryID   = errorKind{"InvalidBatchEntryId", "AWS.SimpleQueueService.InvalidBatchEntryId", 400, true}
	kTooManyEntries        = errorKind{"TooManyEntriesInBatchRequest", "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400, true}
	kUnsupportedOperation  = errorKind{"UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation", 400, true}
	kResourceNotFound      = errorKind{"ResourceNotFoundException", "ResourceNotFoundException", 404, true}
	kInvalidAction         = errorKind{"InvalidAction", "InvalidAction", 400, true}
	kMissingAction         = errorKind{"MissingAction", "MissingAction", 400, true}
	kSerialization         = errorKind{"SerializationException", "SerializationException", 400, true}
	kInvalidClientTokenID  = errorKind{"InvalidClientTokenId", "InvalidClientTokenId", 403, true}
	kMissingAuth           = errorKind{"MissingAuthenticationToken", "MissingAuthenticationToken", 403, true}
	kOverLimit             = errorKind{"OverLimit", "OverLimit", 403, true}
	kInternal              = errorKind{"InternalError", "InternalError", 500, false}
	kUnavailable           = errorKind{"ServiceUnavailable", "ServiceUnavailable", 503, false}
)

// Sentinels for errors.Is on the errors the server's methods return: each
// matches every *Error of its type.
var (
	ErrQueueDoesNotExist      error = &Error{Type: kQueueDoesNotExist.typ}
	ErrReceiptHandleIsInvalid error = &Error{Type: kReceiptHandleInvalid.typ}
	ErrInvalidParameterValue  error = &Error{Type: kInvalidParameterValue.typ}
)

// write sends e as the SQS JSON protocol does: the status, the type in
// X-Amzn-ErrorType and in the body's __type, and the legacy code with its
// fault in x-amzn-query-error.
func (e *Error) write(w http.ResponseWriter, requestID string) {
	noteError(w, e)
	fault := "Sender"
	if !e.Sender {
		fault = "Receiver"
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("X-Amzn-ErrorType", e.Type)
	h.Set("X-Amzn-Query-Error", e.QueryCode+";"+fault)
	h.Set("X-Amzn-RequestId", requestID)
	w.WriteHeader(e.Status)
	writeJSON(w, struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{"com.amazonaws.sqs#" + e.Type, e.Message})
}

// asError turns any error of a handler into the *Error to send: its own, or
// an InternalError naming it.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return kInternal.new("%v", err)
}
