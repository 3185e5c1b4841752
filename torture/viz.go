package torture

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Porcupine writes each visualization as a page of its own with its whole
// viewer (about 1,000 lines of script and style) around one line of data.
// The report has a page per run, so the viewer is written once, next to
// them, and each page keeps only its data.
const (
	vizScript = "porcupine-viewer.js"
	vizStyle  = "porcupine-viewer.css"
)

// writeVisualization writes porcupine's visualization of info to path,
// with the viewer in shared files of path's directory. When porcupine's
// page does not have the expected shape, it writes the page whole.
func writeVisualization(model porcupine.Model, info porcupine.LinearizationInfo, path string) error {
	var page bytes.Buffer
	if err := porcupine.Visualize(model, info, &page); err != nil {
		return err
	}
	style, script, slim, err := splitVisualization(page.String())
	if err != nil {
		return os.WriteFile(path, page.Bytes(), 0o644)
	}
	dir := filepath.Dir(path)
	return errors.Join(
		os.WriteFile(filepath.Join(dir, vizStyle), []byte(style), 0o644),
		os.WriteFile(filepath.Join(dir, vizScript), []byte(script), 0o644),
		os.WriteFile(path, []byte(slim), 0o644))
}

// splitVisualization takes porcupine's page apart: the contents of its
// <style>, its script up to the data, and the page that loads those two
// and keeps the data and the call that renders it.
func splitVisualization(page string) (style, script, slim string, err error) {
	bad := errors.New("porcupine's page does not have the expected shape")
	styleAt, styleEnd := strings.Index(page, "<style>"), strings.Index(page, "</style>")
	scriptAt, scriptEnd := strings.Index(page, "<script>"), strings.LastIndex(page, "</script>")
	dataAt := strings.LastIndex(page, "const data = ")
	if styleAt < 0 || styleEnd < styleAt || scriptAt < styleEnd || dataAt < scriptAt || scriptEnd < dataAt {
		return "", "", "", bad
	}
	style = page[styleAt+len("<style>") : styleEnd]
	script = page[scriptAt+len("<script>") : dataAt]
	slim = page[:styleAt] + `<link rel="stylesheet" href="` + vizStyle + `">` +
		page[styleEnd+len("</style>"):scriptAt] +
		`<script src="` + vizScript + `"></script>` + "\n    <script>\n      " + page[dataAt:]
	return style, script, slim, nil
}
