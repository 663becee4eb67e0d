package views

import (
	"strconv"
)

// Activity is Settings → Activity: charts of the run rollups over a range,
// each with the table of its numbers.
type Activity struct {
	Range  string // "24h", "7d" or "30d"
	Ranges []ActivityRange
	Charts []Chart
}

// ActivityRange is one choice of the range selector.
type ActivityRange struct {
	Value, Label string
	Current      bool
}

// Chart is a horizontal bar chart drawn as SVG on the server, with its table.
// Bars are scaled to Max; Columns head the table, each bar's Cells its row.
type Chart struct {
	ID, Title, Note string
	Max             float64
	Bars            []Bar
	Columns         []string
	Rows            [][]string
	Empty           string // shown instead when there is nothing to draw
}

// Bar is one bar: Label on the left, Text (the value as read) on the right;
// Class picks its colour.
type Bar struct {
	Label, Text, Class string
	Value              float64
}

// The chart's geometry, in SVG user units.
const (
	chartLabelW = 200
	chartBarW   = 300
	chartRowH   = 22
	chartWidth  = chartLabelW + chartBarW + 110
)

func chartHeight(c Chart) string { return strconv.Itoa(len(c.Bars)*chartRowH + 4) }
func chartViewBox(c Chart) string {
	return "0 0 " + strconv.Itoa(chartWidth) + " " + chartHeight(c)
}
func barY(i int) string     { return strconv.Itoa(i*chartRowH + 2) }
func barTextY(i int) string { return strconv.Itoa(i*chartRowH + 16) }
func barX() string          { return strconv.Itoa(chartLabelW) }
func barTextX() string      { return strconv.Itoa(chartLabelW + chartBarW + 6) }
func barH() string          { return strconv.Itoa(chartRowH - 6) }

func barWidth(c Chart, b Bar) string {
	if c.Max <= 0 || b.Value <= 0 {
		return "0"
	}
	w := b.Value / c.Max * chartBarW
	return strconv.FormatFloat(max(w, 1), 'f', 1, 64)
}

// barLabel keeps a long name from running into the bars; the table has it whole.
func barLabel(s string) string {
	r := []rune(s)
	if len(r) > 28 {
		return string(r[:27]) + "…"
	}
	return s
}
