package s3test

import (
	"net/http/httptest"
	"testing"
)

func TestOp(t *testing.T) {
	for _, tc := range []struct {
		method, target, want string
	}{
		{"PUT", "/b/k?x-id=PutObject", "PutObject"},
		{"PUT", "/b/a/b/c", "PutObject"},
		{"PUT", "/b/k?partNumber=2&uploadId=u&x-id=UploadPart", "UploadPart"},
		{"POST", "/b/k?uploads=", "CreateMultipartUpload"},
		{"POST", "/b/k?uploadId=u", "CompleteMultipartUpload"},
		{"DELETE", "/b/k?uploadId=u", "AbortMultipartUpload"},
		{"GET", "/b?uploads=", "ListMultipartUploads"},
		{"GET", "/b/k?uploadId=u", "ListParts"},
		{"GET", "/b/k?x-id=GetObject", "GetObject"},
		{"HEAD", "/b/k", "HeadObject"},
		{"DELETE", "/b/k?x-id=DeleteObject", "DeleteObject"},
		{"GET", "/b?list-type=2&prefix=p", "ListObjectsV2"},
		{"GET", "/b/?list-type=2", "ListObjectsV2"},
		{"HEAD", "/b", "HeadBucket"},
		{"PUT", "/b", "CreateBucket"},
		{"DELETE", "/b", "DeleteBucket"},
		{"PUT", "/b/k?retention=", "PUT?retention"},
		{"GET", "/b?object-lock=", "GET?object-lock"},
		{"GET", "/b?versions=&prefix=k", "GET?versions"},
	} {
		t.Run(tc.method+" "+tc.target, func(t *testing.T) {
			if got := Op(httptest.NewRequest(tc.method, tc.target, nil)); got != tc.want {
				t.Errorf("Op = %q; want %q", got, tc.want)
			}
		})
	}
}
