package sqsserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"time"

	"github.com/leasebus/leasebus/lease"
)

// A receipt handle names one receive of one message: the queue's
// incarnation (a random number given to each queue when it is created, so
// a handle of a deleted queue does not work on a new one of the same
// name), the leasebus lease, and the time of the receive (for the 12-hour
// limit of ChangeMessageVisibility), authenticated by an HMAC-SHA256 with
// the server's key and encoded in URL-safe base64. A handle that does not
// decode or whose MAC is wrong was never issued: ReceiptHandleIsInvalid.
type receipt struct {
	gen        uint64
	lease      lease.ID
	receivedAt time.Time
}

const (
	handleVersion = 1
	handleBody    = 1 + 8 + 8 + 8 + 4 + 8
	handleMAC     = 16
)

func (s *Server) encodeHandle(r receipt) string {
	var b [handleBody + handleMAC]byte
	b[0] = handleVersion
	binary.BigEndian.PutUint64(b[1:], r.gen)
	binary.BigEndian.PutUint64(b[9:], r.lease.Scope())
	binary.BigEndian.PutUint64(b[17:], r.lease.Seq())
	binary.BigEndian.PutUint32(b[25:], r.lease.Delivery())
	binary.BigEndian.PutUint64(b[29:], uint64(r.receivedAt.UnixNano()))
	copy(b[handleBody:], s.mac(b[:handleBody]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (s *Server) decodeHandle(h string) (receipt, bool) {
	b, err := base64.RawURLEncoding.DecodeString(h)
	if err != nil || len(b) != handleBody+handleMAC || b[0] != handleVersion {
		return receipt{}, false
	}
	if !hmac.Equal(b[handleBody:], s.mac(b[:handleBody])) {
		return receipt{}, false
	}
	return receipt{
		gen: binary.BigEndian.Uint64(b[1:]),
		lease: lease.NewID(binary.BigEndian.Uint64(b[9:]), binary.BigEndian.Uint64(b[17:]),
			binary.BigEndian.Uint32(b[25:])),
		receivedAt: time.Unix(0, int64(binary.BigEndian.Uint64(b[29:]))),
	}, true
}

func (s *Server) mac(b []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(b)
	return m.Sum(nil)[:handleMAC]
}
