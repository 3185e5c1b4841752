//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package filelock

// canWatch: there is no inotify to wake waiters.
const canWatch = false

// watcher is a no-op where inotify does not exist: waiters poll.
type watcher struct{}

type subscription struct{ C chan struct{} }

func (w *watcher) subscribe(string) *subscription { return nil }

func (w *watcher) subscribeDir(string, ...string) *subscription { return nil }

func (w *watcher) subscribeDirTo(chan struct{}, string, ...string) *subscription { return nil }

func (w *watcher) subscribeMatch(string, func(string) bool) *subscription { return nil }

func (s *subscription) close() {}
