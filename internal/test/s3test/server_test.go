package s3test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestServerRestart: a restarted server answers on the same endpoint with
// the objects it had; while stopped it answers nothing.
func TestServerRestart(t *testing.T) {
	s := Start(t)
	s.CreateBucket(t, "restart", false)
	ctx := context.Background()
	if _, err := s.Client(t).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("restart"), Key: aws.String("k"), Body: strings.NewReader("v")}); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	if _, err := s.Client(t).HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("restart"), Key: aws.String("k")}); err == nil {
		t.Fatal("a stopped server answered")
	}
	s.Restart(t)
	out, err := s.Client(t).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("restart"), Key: aws.String("k")})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	defer out.Body.Close()
	if b, err := io.ReadAll(out.Body); err != nil || string(b) != "v" {
		t.Fatalf("object after restart: %q, %v", b, err)
	}
}
