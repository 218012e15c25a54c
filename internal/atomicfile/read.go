package atomicfile

import (
	"fmt"
	"io"
	"os"
)

// ReadBounded reads a state file whole, refusing one past limit bytes: a
// damaged or planted file must not make its reader allocate without end.
func ReadBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return b, err
}
