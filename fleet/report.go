package fleet

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// Report is the fleet at one time: every cluster judged, the clusters
// with problems first.
type Report struct {
	Now      time.Time `json:"now"`
	Clusters []Status  `json:"clusters"`
}

// NewReport assesses every cluster at now. Clusters with problems come
// first (the most problems first), then by store and name.
func NewReport(cs []Cluster, p Policy, now time.Time) *Report {
	r := &Report{Now: now, Clusters: make([]Status, 0, len(cs))}
	for _, c := range cs {
		r.Clusters = append(r.Clusters, Assess(c, p, now))
	}
	sort.SliceStable(r.Clusters, func(i, j int) bool {
		a, b := r.Clusters[i], r.Clusters[j]
		if len(a.Problems) != len(b.Problems) {
			return len(a.Problems) > len(b.Problems)
		}
		if a.Store != b.Store {
			return a.Store < b.Store
		}
		return a.Name < b.Name
	})
	return r
}

// WithProblems is the report with only the clusters that have a problem.
func (r *Report) WithProblems() *Report {
	out := &Report{Now: r.Now, Clusters: []Status{}}
	for _, s := range r.Clusters {
		if len(s.Problems) > 0 {
			out.Clusters = append(out.Clusters, s)
		}
	}
	return out
}

// Problems counts the clusters with a problem.
func (r *Report) Problems() int {
	n := 0
	for _, s := range r.Clusters {
		if len(s.Problems) > 0 {
			n++
		}
	}
	return n
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// Columns are the table's column heads, in order.
var Columns = []string{"STORE", "CLUSTER", "NEWEST", "NEXT", "RECOVERY POINT", "WINDOW", "DRILL", "COPIES", "CERT", "AGENT", "PROBLEMS"}

// Row is a cluster's table row, one cell per column.
func (r *Report) Row(s Status) []string {
	problems := "-"
	if len(s.Problems) > 0 {
		texts := make([]string, len(s.Problems))
		for i, p := range s.Problems {
			texts[i] = p.Text
		}
		problems = strings.Join(texts, "; ")
	}
	return []string{s.Store, s.Name, r.newest(s), r.next(s), r.recovery(s), window(s), r.drill(s), copies(s), r.cert(s), r.agent(s), problems}
}

// WriteTable writes the report as a table, a row per cluster.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(Columns, "\t"))
	indexed := 0
	for _, s := range r.Clusters {
		fmt.Fprintln(tw, strings.Join(r.Row(s), "\t"))
		if !s.IndexedAt.IsZero() {
			indexed++
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if indexed > 0 {
		_, err := fmt.Fprintf(w, "\n%d of %d clusters read through their agents' indexes: backups as each agent last listed them, "+
			"not checked against the store by this read (--full lists every object).\n", indexed, len(r.Clusters))
		return err
	}
	return nil
}

func (r *Report) ago(t time.Time) string { return human(r.Now.Sub(t)) + " ago" }

func (r *Report) newest(s Status) string {
	if s.Newest == nil {
		return "none"
	}
	return fmt.Sprintf("%s (%s)", s.Newest.ID, r.ago(s.Newest.CreatedAt))
}

func (r *Report) next(s Status) string {
	if s.NextExpected == nil {
		return "-"
	}
	d := s.NextExpected.Sub(r.Now)
	if d >= 0 {
		return fmt.Sprintf("in %s (%s)", human(d), s.ExpectedBy)
	}
	return fmt.Sprintf("%s late (%s)", human(-d), s.ExpectedBy)
}

func (r *Report) recovery(s Status) string {
	if s.RecoveryPoint == nil {
		return "none"
	}
	return fmt.Sprintf("%s (%s)", r.ago(*s.RecoveryPoint), s.RecoverySource)
}

func window(s Status) string {
	w := s.Window
	if w == nil {
		return "-"
	}
	return fmt.Sprintf("r%d-r%d", w.From, w.Through)
}

func (r *Report) drill(s Status) string {
	d := s.Drill
	if d == nil {
		return "never"
	}
	switch d.State {
	case repository.DrillPassed:
		return fmt.Sprintf("passed %s (RTO %.1fs)", r.ago(d.Started), float64(d.RTO))
	case repository.DrillFailed:
		return "FAILED " + r.ago(d.Started)
	}
	return "UNKNOWN " + r.ago(d.Started)
}

func copies(s Status) string {
	if s.Agent == nil || len(s.Agent.Copies) == 0 {
		return "-"
	}
	names := make([]string, len(s.Agent.Copies))
	for i, c := range s.Agent.Copies {
		names[i] = c.Name
	}
	return strings.Join(names, ",")
}

func (r *Report) cert(s Status) string {
	if s.Kit == nil || s.Kit.CertExpiry.IsZero() {
		return "-"
	}
	return fmt.Sprintf("%s (in %s)", s.Kit.CertExpiry.Format(time.DateOnly), human(s.Kit.CertExpiry.Sub(r.Now)))
}

func (r *Report) agent(s Status) string {
	a := s.Agent
	if a == nil {
		return "none"
	}
	role := "standby"
	if a.Leader {
		role = "leader"
	}
	if a.Mode == repository.AgentOnce {
		role = "once"
	}
	return fmt.Sprintf("%s %s (%s)", r.ago(a.WrittenAt), a.Version, role)
}
