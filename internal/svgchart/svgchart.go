// Package svgchart draws small line charts as standalone SVG documents:
// the simulator's report and the operator console's rule pages. It is a
// few dozen lines of the standard library instead of a plotting module
// (and its fonts and image codecs) in the product's dependency graph.
package svgchart

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Series is one line: a label for the legend and one value per point.
type Series struct {
	Label  string
	Values []float64
}

// Chart is a line chart over shared x positions.
type Chart struct {
	Title string
	// XLabels names the points (every label is drawn when there are at
	// most 24, else every len/12-th).
	XLabels []string
	XTitle  string
	YTitle  string
	Series  []Series
	// Width and Height in pixels; default 700×400.
	Width, Height int
}

// palette and dashes tell the series apart, in print too.
var (
	palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f"}
	dashes  = []string{"", "6,3", "2,2", "8,3,2,3", "1,3", "10,4", "4,4,1,4", "3,6"}
)

// Write renders c as an SVG document.
func (c Chart) Write(w io.Writer) error {
	_, err := io.WriteString(w, c.SVG())
	return err
}

// SVG renders c as an SVG document.
func (c Chart) SVG() string {
	W, H := c.Width, c.Height
	if W == 0 {
		W = 700
	}
	if H == 0 {
		H = 400
	}
	const left, right, top, bottom = 60, 20, 40, 50
	pw, ph := float64(W-left-right), float64(H-top-bottom)
	n := c.points()
	ymax, step := niceScale(c.maxValue())
	x := func(i int) float64 {
		if n <= 1 {
			return left
		}
		return left + pw*float64(i)/float64(n-1)
	}
	y := func(v float64) float64 { return top + ph - ph*v/ymax }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`, W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`, W, H)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" text-anchor="middle">%s</text>`, W/2, esc(c.Title))
	for v := 0.0; v <= ymax+step/2; v += step {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`, left, left+pw, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`, left-6, y(v)+4, trim(v))
	}
	every := 1
	if n > 24 {
		every = (n + 11) / 12
	}
	for i := 0; i < n; i += every {
		label := fmt.Sprint(i)
		if i < len(c.XLabels) {
			label = c.XLabels[i]
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`, x(i), top+ph+16, esc(label))
	}
	fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%.1f" stroke="black"/>`, left, left, top, top+ph)
	fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="black"/>`, left, left+pw, top+ph, top+ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`, left+pw/2, H-8, esc(c.XTitle))
	fmt.Fprintf(&b, `<text x="14" y="%.1f" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>`, top+ph/2, top+ph/2, esc(c.YTitle))
	for i, s := range c.Series {
		drawSeries(&b, i, s, x, y, left+pw, top)
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// points is how many x positions the chart has: its labels', or its
// longest series'.
func (c Chart) points() int {
	n := len(c.XLabels)
	for _, s := range c.Series {
		n = max(n, len(s.Values))
	}
	return n
}

// maxValue is the largest value of any series (NaN: no value), 0 if none.
func (c Chart) maxValue() float64 {
	ymax := 0.0
	for _, s := range c.Series {
		for _, v := range s.Values {
			if !math.IsNaN(v) {
				ymax = max(ymax, v)
			}
		}
	}
	return ymax
}

// drawSeries draws the i-th series s as a line on the scales x and y
// (NaN values skipped), with its legend entry at the plot's top right
// (plot's right edge at pr, its top at top).
func drawSeries(b *strings.Builder, i int, s Series, x func(int) float64, y func(float64) float64, pr float64, top int) {
	var pts []string
	for j, v := range s.Values {
		if !math.IsNaN(v) {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(j), y(v)))
		}
	}
	dash := ""
	if d := dashes[i%len(dashes)]; d != "" {
		dash = ` stroke-dasharray="` + d + `"`
	}
	fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.8"%s points="%s"><title>%s</title></polyline>`,
		palette[i%len(palette)], dash, strings.Join(pts, " "), esc(s.Label))
	ly := top + 14*i + 6
	fmt.Fprintf(b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" stroke-width="1.8"%s/>`, pr-150, pr-126, ly, ly, palette[i%len(palette)], dash)
	fmt.Fprintf(b, `<text x="%.1f" y="%d">%s</text>`, pr-120, ly+4, esc(s.Label))
}

// niceScale rounds the axis top up to 1, 2 or 5 times a power of ten and
// returns it with its grid step (five to ten lines).
func niceScale(v float64) (top, step float64) {
	if v <= 0 {
		return 1, 0.2
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			top = m * p
			break
		}
	}
	step = top / 5
	return top, step
}

func trim(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func esc(s string) string { return html.EscapeString(s) }
