package scrub

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ParsePercent parses scrub.read_data: a number from 0 to 100 with an
// optional % sign ("5%", "2.5", "100%").
func ParsePercent(s string) (float64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSpace(strings.TrimSuffix(t, "%"))
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" || strings.ContainsAny(t, "xXpPeE_") || math.IsNaN(f) || f < 0 || f > 100 {
		return 0, fmt.Errorf("%q is not a percentage from 0%% to 100%% (e.g. 5%%)", s)
	}
	return f, nil
}
