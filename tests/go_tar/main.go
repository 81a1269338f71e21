// tarlist: tars read with Go's archive/tar, the reader skopeo and umoci use. For each path
// given, one JSON line: its members (name and link target in hex, so that no byte is changed on
// the way, and the sha256 of the data read) and how the reading ended ("" at the end marker, or
// Go's error). The differential tests compare it with vmjudge's own reader.
package main

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
)

type member struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Linkname string `json:"linkname"`
	Mode     int64  `json:"mode"`
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	Data     string `json:"sha256"`
	Read     int64  `json:"read"`
}

type listing struct {
	Members []member `json:"members"`
	Error   string   `json:"error"`
}

func list(path string) listing {
	var l listing
	f, err := os.Open(path)
	if err != nil {
		l.Error = err.Error()
		return l
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReader(f))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return l
		}
		if err != nil {
			l.Error = err.Error()
			return l
		}
		h := sha256.New()
		n, err := io.Copy(h, tr)
		if err != nil {
			l.Error = err.Error()
			return l
		}
		l.Members = append(l.Members, member{hex.EncodeToString([]byte(hdr.Name)), string([]byte{hdr.Typeflag}),
			hdr.Size, hex.EncodeToString([]byte(hdr.Linkname)), hdr.Mode, hdr.Uid, hdr.Gid,
			hex.EncodeToString(h.Sum(nil)), n})
	}
}

func main() {
	out := json.NewEncoder(os.Stdout)
	for _, path := range os.Args[1:] {
		out.Encode(list(path))
	}
}
