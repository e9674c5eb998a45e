package fleet

import (
	"bytes"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// screenshotOut, when set, is where TestStatusPageInChromium keeps its
// screenshot (cropped): the picture of the page in docs/fleet.md is made
// with go test ./fleet -run TestStatusPageInChromium -args -screenshot ../docs/fleet-status-page.png
var screenshotOut = flag.String("screenshot", "", "TestStatusPageInChromium: write the status page's screenshot (PNG) to this file")

// The status page's row colours (page's style): tr.problem and tr.ok.
var (
	problemRow = color.RGBA{0xfd, 0xe2, 0xe2, 0xff}
	okRow      = color.RGBA{0xe6, 0xf6, 0xe6, 0xff}
)

// chromiumBinary is CHROMIUM_BIN or chromium on PATH (Debian's, put
// there by make tools: scripts/install-chromium.sh); under CI=true a
// missing one fails the test.
func chromiumBinary(t *testing.T) string {
	t.Helper()
	if b := os.Getenv("CHROMIUM_BIN"); b != "" {
		return b
	}
	b, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not found (make tools installs Debian's: scripts/install-chromium.sh); CI=true requires it")
		}
		t.Skip("chromium not found: run make tools as root (scripts/install-chromium.sh) or set CHROMIUM_BIN")
	}
	return b
}

// chromium runs headless Chromium on url with args (--dump-dom,
// --screenshot=FILE) and returns its stdout.
func chromium(t *testing.T, bin, url string, args ...string) []byte {
	t.Helper()
	profile := t.TempDir()
	cmd := exec.CommandContext(t.Context(), bin, append([]string{"--headless", "--no-sandbox", "--disable-gpu",
		"--disable-dev-shm-usage", "--hide-scrollbars", "--no-first-run", "--user-data-dir=" + profile,
		"--force-device-scale-factor=1"}, append(args, url)...)...)
	cmd.Env = append(os.Environ(), "HOME="+profile)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.Bytes()
}

// TestStatusPageInChromium: a fleet of 24 clusters (17 backed up on
// schedule, 7 with problems: stale by their own schedules, one of them
// with a silent agent too) served by a real hub, opened in headless
// Chromium. The DOM Chromium builds lists every cluster once, the seven
// problem clusters first, each with its problems; the screenshot has
// seven problem-coloured row bands above the seventeen clean ones,
// nothing else in between.
func TestStatusPageInChromium(t *testing.T) {
	bin := chromiumBinary(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	problems := map[string]bool{}
	var names []string
	for i := range 24 {
		name := fmt.Sprintf("cluster-%02d", i)
		names = append(names, name)
		switch {
		case i%4 == 1: // stale by its hourly schedule
			synthetic(t, st, name, "cdf818194e3a8c32", now.Add(-5*time.Hour-time.Duration(i)*time.Minute))
			status(t, st, name, "@every 1h", now)
			problems[name] = true
		case i == 6: // stale, and its agent silent for two hours
			synthetic(t, st, name, "cdf818194e3a8c32", now.Add(-3*time.Hour))
			status(t, st, name, "@every 30m", now.Add(-2*time.Hour))
			problems[name] = true
		default: // on schedule
			synthetic(t, st, name, "cdf818194e3a8c32", now.Add(-2*time.Hour), now.Add(-time.Hour), now.Add(-time.Duration(i)*time.Minute))
			status(t, st, name, "@every 1h", now)
		}
	}
	h := NewHub(HubConfig{Sources: []Source{{Name: "s3://backups/prod", Store: st}}}, nil)
	if err := h.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := h.Report().Problems(); got != len(problems) {
		t.Fatalf("the report has %d clusters with problems, want %d", got, len(problems))
	}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()

	dom := string(chromium(t, bin, srv.URL+"/", "--dump-dom"))
	checkPageDOM(t, dom, names, problems)

	shot := filepath.Join(t.TempDir(), "page.png")
	chromium(t, bin, srv.URL+"/", "--window-size=1400,3000", "--screenshot="+shot)
	img := readPNG(t, shot)
	bands := rowBands(img, 20)
	want := strings.Repeat("P", len(problems)) + strings.Repeat("O", len(names)-len(problems))
	if bands != want {
		t.Errorf("row bands down the page's left edge: %s, want %s (P: a problem row, O: a clean one)", bands, want)
	}
	if *screenshotOut != "" {
		writePNG(t, *screenshotOut, crop(img))
	}
}

var rowRe = regexp.MustCompile(`(?s)<tr class="(problem|ok)">(.*?)</tr>`)
var nameRe = regexp.MustCompile(`<a href="/cluster\?[^"]*">([^<]+)</a>`)

// checkPageDOM: every cluster has one row, the problem ones first, each
// problem row naming its problems.
func checkPageDOM(t *testing.T, dom string, names []string, problems map[string]bool) {
	t.Helper()
	rows := rowRe.FindAllStringSubmatch(dom, -1)
	var seen []string
	clean := false
	for _, r := range rows {
		m := nameRe.FindStringSubmatch(r[2])
		if m == nil {
			t.Errorf("a row without a cluster link: %s", r[2])
			continue
		}
		name := m[1]
		seen = append(seen, name)
		isProblem := r[1] == "problem"
		if isProblem != problems[name] {
			t.Errorf("cluster %s shown as %s, has problems %v", name, r[1], problems[name])
		}
		if isProblem && clean {
			t.Errorf("problem cluster %s below a clean one", name)
		}
		clean = clean || !isProblem
		if isProblem && !strings.Contains(r[2], "<b>stale</b>") {
			t.Errorf("problem row of %s does not name its problem: %s", name, r[2])
		}
	}
	slices.Sort(seen)
	if !slices.Equal(seen, names) {
		t.Errorf("the page lists %v, want every cluster once: %v", seen, names)
	}
}

func readPNG(t *testing.T, file string) image.Image {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("screenshot %s: %v", file, err)
	}
	return img
}

// rowBands reads the column x of img top to bottom and returns a letter
// per band of a row colour: P for a problem row, O for a clean one
// (a row's border or anything else between two bands ends a band).
func rowBands(img image.Image, x int) string {
	var b strings.Builder
	last := byte(0)
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)
		cur := byte(0)
		switch c {
		case problemRow:
			cur = 'P'
		case okRow:
			cur = 'O'
		}
		if cur != 0 && cur != last {
			b.WriteByte(cur)
		}
		last = cur
	}
	return b.String()
}

// crop cuts img below its last row that is not plain white, and right of
// its last such column, leaving a margin.
func crop(img image.Image) image.Image {
	r := img.Bounds()
	maxX, maxY := r.Min.X, r.Min.Y
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			if c := color.RGBAModel.Convert(img.At(x, y)).(color.RGBA); c.R < 0xf8 || c.G < 0xf8 || c.B < 0xf8 {
				maxX, maxY = max(maxX, x), max(maxY, y)
			}
		}
	}
	type subImager interface {
		SubImage(image.Rectangle) image.Image
	}
	if s, ok := img.(subImager); ok {
		return s.SubImage(image.Rect(r.Min.X, r.Min.Y, min(r.Max.X, maxX+16), min(r.Max.Y, maxY+16)))
	}
	return img
}

func writePNG(t *testing.T, file string, img image.Image) {
	t.Helper()
	var buf bytes.Buffer
	enc := png.Encoder{CompressionLevel: png.BestCompression}
	if err := enc.Encode(&buf, paletted(img)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot written to %s (%d bytes)", file, buf.Len())
}

// paletted is img in its 256 most frequent colours (each other pixel the
// nearest of them): a screenshot of text on flat colours loses nothing
// one sees, and its PNG is a fraction of the size.
func paletted(img image.Image) *image.Paletted {
	count := map[color.RGBA]int{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			count[color.RGBAModel.Convert(img.At(x, y)).(color.RGBA)]++
		}
	}
	cs := slices.SortedFunc(maps.Keys(count), func(a, b color.RGBA) int { return count[b] - count[a] })
	var pal color.Palette
	for _, c := range cs[:min(256, len(cs))] {
		pal = append(pal, c)
	}
	dst := image.NewPaletted(r, pal)
	draw.Draw(dst, r, img, r.Min, draw.Src)
	return dst
}
