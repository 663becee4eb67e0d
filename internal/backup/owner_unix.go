//go:build unix

package backup

import (
	"io/fs"
	"os"
	"syscall"
)

// chownLike gives path the owner of the data directory when running as root; as any
// other user the files are already that user's.
func chownLike(path string, dir fs.FileInfo) {
	st, ok := dir.Sys().(*syscall.Stat_t)
	if !ok || os.Geteuid() != 0 {
		return
	}
	_ = os.Lchown(path, int(st.Uid), int(st.Gid))
}
