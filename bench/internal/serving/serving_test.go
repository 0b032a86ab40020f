package serving

import (
	"os"
	"testing"
)

func TestMiBReadsTheProcessStatus(t *testing.T) {
	t.Parallel()
	rss, err := MiB(os.Getpid(), "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS: %v MiB, %v", rss, err)
	}
	if hwm, err := MiB(os.Getpid(), "VmHWM"); err != nil || hwm < rss {
		t.Errorf("VmHWM: %v MiB (VmRSS %v), %v", hwm, rss, err)
	}
	if _, err := MiB(os.Getpid(), "VmNothing"); err == nil {
		t.Error("a field the status lacks read as a number")
	}
}
