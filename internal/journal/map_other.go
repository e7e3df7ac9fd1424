//go:build !unix

package journal

// mapSegment reads the segment file at path (mapped where the system is a
// Unix).
func mapSegment(path string) (data []byte, release func(), err error) {
	data, err = readSegment(path)
	return data, func() {}, err
}
