package sqsserver

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
)

// md5Hex is the lowercase hex MD5 of s: SQS's MD5OfMessageBody.
func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Transport type bytes of SQS's attribute checksum.
const (
	transportString = 1
	transportBinary = 2
)

// attributesMD5 computes MD5OfMessageAttributes (and
// MD5OfMessageSystemAttributes) as SQS does: over the attributes sorted by
// name, each encoded as its name, its data type, one transport-type byte
// (1 string or number, 2 binary) and its value, every string and value
// prefixed by its length in bytes as a 4-byte big-endian integer. It
// returns "" for no attributes (SQS then leaves the field out).
func attributesMD5(attrs []attribute) string {
	if len(attrs) == 0 {
		return ""
	}
	sorted := slices.Clone(attrs)
	sortAttributes(sorted)
	h := md5.New()
	for _, a := range sorted {
		putLenBytes(h, []byte(a.Name))
		putLenBytes(h, []byte(a.DataType))
		if a.isBinary() {
			h.Write([]byte{transportBinary})
			putLenBytes(h, a.Binary)
		} else {
			h.Write([]byte{transportString})
			putLenBytes(h, []byte(a.String))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func putLenBytes(h hash.Hash, b []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	h.Write(n[:])
	h.Write(b)
}
