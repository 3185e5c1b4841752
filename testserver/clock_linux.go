package testserver

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// mapOffset creates file holding a zero offset and maps it shared, so that
// a store to the mapping is what the shim of the server reads next; the
// mapping is removed when t ends.
func mapOffset(t testing.TB, file string) (func(time.Duration), error) {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := f.Truncate(8); err != nil {
		return nil, err
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	var (
		mu       sync.Mutex
		unmapped bool
	)
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		unmapped = true
		_ = syscall.Munmap(mem)
	})
	// The page is aligned, so the word is too: the shim's atomic load
	// sees the whole offset, old or new.
	word := (*int64)(unsafe.Pointer(&mem[0]))
	return func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		if !unmapped {
			atomic.StoreInt64(word, int64(d))
		}
	}, nil
}
