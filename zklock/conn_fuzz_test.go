package zklock_test

import (
	"encoding/binary"
	"testing"

	"github.com/distlock/distlock/zklock"
)

// frame is one ZooKeeper frame: body's length, then body.
func frame(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)
}

// createRequest is the frame of a create request of path, as the zk
// client writes it: xid, opcode 1, then the path, its length first.
func createRequest(path string) []byte {
	body := binary.BigEndian.AppendUint32(nil, 7)
	body = binary.BigEndian.AppendUint32(body, 1)
	body = binary.BigEndian.AppendUint32(body, uint32(len(path)))
	body = append(body, path...)
	body = append(body, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 3) // no data, no ACL, flags
	return frame(body)
}

// The reading along of a connection never panics, whatever the bytes (a
// server's replies are not trusted; the frames may come cut anywhere), and
// sees a create request of a path that fits its head, and only that one,
// wherever the request is cut.
func FuzzReadAlong(f *testing.F) {
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'a'
	}
	f.Add("/distlock/k/_c_x-lock-", []byte{}, []byte{}, 3, 0)
	f.Add("/p", []byte{0xff, 0xff, 0xff, 0xff, 1, 2}, []byte{0, 0, 0, 30, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xf0}, 40, 5)
	f.Add(string(long), []byte{0, 0, 0, 0}, frame([]byte{1, 2, 3}), 4100, 2)
	f.Add("", frame(long), frame(long[:4200]), 0, 4000)
	// Lengths of a path far beyond the frame: a create request's, and a
	// create reply's (xid 7, the create's above; zxid; no error).
	huge := []byte{0x7f, 0xff, 0xff, 0xf0, 'a', 'b'}
	connected := frame(make([]byte, 36))
	f.Add("/q", frame(append([]byte{0, 0, 0, 8, 0, 0, 0, 1}, huge...)), append(connected, frame(append([]byte{0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0}, huge...))...), 60, 41)
	f.Add("/q", frame(append([]byte{0, 0, 0, 8, 0, 0, 0, 1}, 0xff, 0xff, 0xff, 0xff)), append(connected, frame([]byte{0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})...), 0, 0)
	f.Fuzz(func(t *testing.T, path string, moreRequests, replies []byte, cutRequests, cutReplies int) {
		// The connect request comes first, without a header; a reply frame
		// of the connect response likewise.
		requests := append(frame(make([]byte, 44)), createRequest(path)...)
		requests = append(requests, moreRequests...)
		cut := func(n, of int) int {
			if of == 0 {
				return 0
			}
			return int(uint(n) % uint(of+1))
		}
		seen := zklock.ReadAlong(requests, replies, cut(cutRequests, len(requests)), cut(cutReplies, len(replies)), path)
		if want := len(path) > 0 && len(path) <= 4096; seen != want {
			t.Errorf("create of a %d-byte path seen: %v, want %v", len(path), seen, want)
		}
	})
}
