package console

import (
	"embed"
	"io/fs"
)

// assets are the page's files: index.html, console.css, console.js. They
// are everything the page loads besides the API's answers.
//
//go:embed assets
var assets embed.FS

// MaxAssetBytes bounds the embedded files' total size (a test holds them
// to it): the page stays light enough for an operator on a slow link.
const MaxAssetBytes = 200_000

// AssetBytes returns the embedded files' total size, in bytes.
func AssetBytes() (int64, error) {
	var n int64
	err := fs.WalkDir(assets, "assets", func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += info.Size()
		return nil
	})
	return n, err
}
