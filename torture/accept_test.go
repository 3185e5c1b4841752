package torture

import (
	"encoding/json"
	"net"
	"testing"
	"time"
)

// Strangers that dial the worker's port before the worker (one that hangs
// up at once, one that sends something else, one that claims another pid)
// are dropped; the worker's connection is the one taken.
func TestAcceptHelloDropsStrangers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(time.Minute))
	const pid = 4242
	say := func(msg string) net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if msg != "" {
			if _, err := c.Write([]byte(msg + "\n")); err != nil {
				t.Fatal(err)
			}
		}
		return c
	}
	say("").Close()
	defer say("GET / HTTP/1.0\r\n").Close()
	other, _ := json.Marshal(reply{Event: evHello, Pid: pid + 1})
	defer say(string(other)).Close()
	mine, _ := json.Marshal(reply{Event: evHello, Name: "A", Pid: pid})
	worker := say(string(mine))
	defer worker.Close()

	conn, dec, err := acceptHello(ln, pid)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if conn.RemoteAddr().String() != worker.LocalAddr().String() {
		t.Errorf("took %v, want the worker at %v", conn.RemoteAddr(), worker.LocalAddr())
	}
	// The decoder goes on with the worker's next message.
	next, _ := json.Marshal(reply{Event: evEnd, Grant: 7})
	if _, err := worker.Write(append(next, '\n')); err != nil {
		t.Fatal(err)
	}
	var r reply
	if err := dec.Decode(&r); err != nil || r.Event != evEnd || r.Grant != 7 {
		t.Errorf("next message: %+v, %v", r, err)
	}
}
