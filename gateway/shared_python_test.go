package gateway_test

import (
	"encoding/json"
	"testing"

	"github.com/distlock/distlock/memlock"
)

// The Python client's shared locks, over a gateway on memlock (which
// grants them): two readers share a name with increasing tokens and are
// listed as its readers, a writer's try and an upgrade are refused, a
// waiting writer is granted above the readers once they are released and
// refuses a reader meanwhile, and a dead session's shared lock is given
// back to a waiting writer.
func TestPythonClientShared(t *testing.T) {
	g := start(t, memlock.New())
	out := runE2E(t, g, "shared")
	var got struct {
		Shared            bool     `json:"shared"`
		Increasing        bool     `json:"increasing"`
		Readers           [][2]any `json:"readers"`
		ReaderCheck       [2]bool  `json:"reader_check"`
		WriterTry         string   `json:"writer_try"`
		Upgrade           string   `json:"upgrade"`
		ReaderUnderWriter string   `json:"reader_under_writer"`
		Writer            struct {
			Shared bool `json:"shared"`
			Above  bool `json:"above"`
		} `json:"writer"`
		DeadCameBack bool `json:"dead_came_back"`
		Empty        bool `json:"empty"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	t.Logf("python: %s", out)
	readersOK := len(got.Readers) == 2 && got.Readers[0] == [2]any{"py-1", true} && got.Readers[1] == [2]any{"py-2", true}
	if got.ReaderCheck != [2]bool{false, true} {
		t.Fatalf("check of a reader's token: current %v, reader %v; want false, true", got.ReaderCheck[0], got.ReaderCheck[1])
	}
	if !got.Shared || !got.Increasing || !readersOK || got.WriterTry != "not-acquired" || got.Upgrade != "not-acquired" ||
		got.Writer.Shared || !got.Writer.Above || got.ReaderUnderWriter != "not-acquired" || !got.DeadCameBack || !got.Empty {
		t.Errorf("python: %s; want two shared locks with increasing tokens listed as py-1 and py-2, a writer's try and an upgrade "+
			"not acquired, then an exclusive writer above them that refuses a reader, a dead session's reader back, none left", out)
	}
}
