package partition

import "strconv"

// Count returns n unit names: "0", "1", ... "n-1".
func Count(n int) []string {
	us := make([]string, max(n, 0))
	for i := range us {
		us[i] = strconv.Itoa(i)
	}
	return us
}
