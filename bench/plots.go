package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// series is one curve: a subject's sorted samples.
type series struct {
	name    string
	samples []time.Duration
}

// WritePlots draws the latency and hand-off distributions into dir as PNG
// files: latency-SERVICE.png (Redis, etcd, ZooKeeper, PostgreSQL) and
// handoff-N.png.
func WritePlots(dir string, subjects []Subject, res *Results) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, g := range []struct{ file, title, service string }{
		{"latency-redis.png", "Uncontended acquire + release, Redis", SvcRedis},
		{"latency-etcd.png", "Uncontended acquire + release, etcd", SvcEtcd},
		{"latency-zookeeper.png", "Uncontended acquire + release, ZooKeeper", SvcZK},
		{"latency-postgresql.png", "Uncontended acquire + release, PostgreSQL", SvcPG},
	} {
		var ss []series
		for _, s := range subjects {
			lr := res.Latency[s.ID]
			if lr == nil || len(lr.Samples) == 0 || (s.Service != g.service && !(g.service == SvcRedis && s.Service == SvcRedlock)) {
				continue
			}
			ss = append(ss, series{s.Name, lr.Samples})
		}
		if err := cdfPlot(filepath.Join(dir, g.file), g.title, "cycle latency (µs, log scale)", ss); err != nil {
			return err
		}
	}
	for n, byID := range res.Contention {
		var ss []series
		for _, s := range subjects {
			if cr := byID[s.ID]; cr != nil && len(cr.HandoffGap) > 0 {
				ss = append(ss, series{s.Name, cr.HandoffGap})
			}
		}
		title := fmt.Sprintf("Hand-off gap, %d waiters on one key, hold %v", n, res.Params.Hold)
		if err := cdfPlot(filepath.Join(dir, fmt.Sprintf("handoff-%d.png", n)), title, "release call to the next grant to another waiter (µs, log scale)", ss); err != nil {
			return err
		}
	}
	return nil
}

// cdfPlot draws the empirical distribution of each series on a log x axis.
func cdfPlot(path, title, xlabel string, ss []series) error {
	if len(ss) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of samples at or below"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = false
	p.Legend.YOffs = vg.Points(20)
	for i, s := range ss {
		pts := cdfPoints(s.samples, 400)
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// cdfPoints samples the empirical distribution of sorted at most n points
// (x in µs, at least 0.1 so that the log scale accepts it).
func cdfPoints(sorted []time.Duration, n int) plotter.XYs {
	step := max(1, len(sorted)/n)
	var pts plotter.XYs
	for i := 0; i < len(sorted); i += step {
		pts = append(pts, plotter.XY{X: usec(sorted[i]), Y: float64(i+1) / float64(len(sorted))})
	}
	last := sorted[len(sorted)-1]
	pts = append(pts, plotter.XY{X: usec(last), Y: 1})
	return pts
}

func usec(d time.Duration) float64 { return max(0.1, float64(d)/float64(time.Microsecond)) }
