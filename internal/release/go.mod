module github.com/weirstream/weir/internal/release

go 1.27

require golang.org/x/mod v0.43.0
