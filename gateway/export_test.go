package gateway

// Routes returns the methods of every route of g, by pattern.
func Routes(g *Gateway) map[string][]string {
	out := map[string][]string{}
	for _, rt := range g.routeTable() {
		for m := range rt.methods {
			out[rt.pattern] = append(out[rt.pattern], m)
		}
	}
	return out
}
