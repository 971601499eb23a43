package integration

// Avro serdes and the schema client against the real registry (Apicurio
// Registry's Confluent-compatible API) and the real broker.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/riferrei/srclient"

	"github.com/weirstream/weir/schema"
	"github.com/weirstream/weir/serde"
	"github.com/weirstream/weir/weirtest/kafka"
)

const (
	itUserV1 = `{"type":"record","name":"User","namespace":"weir.it","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"long"}]}`
	// v2 adds a field with a default: it reads v1 data.
	itUserV2 = `{"type":"record","name":"User","namespace":"weir.it","fields":[
		{"name":"name","type":"string"},
		{"name":"age","type":"long"},
		{"name":"country","type":"string","default":"unknown"}]}`
	// v3 changes a field's type: it cannot read v1 or v2 data.
	itUserV3 = `{"type":"record","name":"User","namespace":"weir.it","fields":[
		{"name":"name","type":"int"},
		{"name":"age","type":"long"},
		{"name":"country","type":"string","default":"unknown"}]}`
)

type itUserV1Go struct {
	Name string `avro:"name"`
	Age  int64  `avro:"age"`
}

type itUserV2Go struct {
	Name    string `avro:"name"`
	Age     int64  `avro:"age"`
	Country string `avro:"country"`
}

// newRegistry returns weir's client of the test registry.
func newRegistry(t *testing.T, c *kafka.Env) *schema.Client {
	t.Helper()
	reg, err := schema.New(schema.Config{URL: c.RegistryURL, RetryTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// deleteSubjects removes the subjects when the test ends.
func deleteSubjects(t *testing.T, c *kafka.Env, subjects ...string) {
	client := srclient.NewSchemaRegistryClient(c.RegistryURL, srclient.WithClient(&http.Client{Timeout: 10 * time.Second}))
	t.Cleanup(func() {
		for _, s := range subjects {
			// Soft delete first: registries refuse a hard delete of a live subject.
			_ = client.DeleteSubject(s, false)
			_ = client.DeleteSubject(s, true)
		}
	})
}

// A store's value schema evolves as DESIGN §7 says: v1 records go through
// Kafka and are read by a v2 serde with the added field's default (lazy
// migration); v2 is accepted under BACKWARD_TRANSITIVE, an incompatible v3
// is refused with the registry's reason and leaves the versions unchanged.
func TestAvroStateSchemaEvolution(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	ctx := context.Background()
	reg := newRegistry(t, c)
	app := c.Name(t, "app")
	subject := schema.StoreSubject(app, "users", schema.Value)
	deleteSubjects(t, c, subject)
	topic := app + "-users-changelog"
	c.CreateTopic(t, topic, 1, nil)
	storeSubject := func(string) string { return subject }

	if err := reg.SetCompatibility(ctx, subject, schema.BackwardTransitive); err != nil {
		t.Fatalf("set %s to BACKWARD_TRANSITIVE: %v", subject, err)
	}
	if level, err := reg.Compatibility(ctx, subject); err != nil || level != schema.BackwardTransitive {
		t.Errorf("compatibility of %s = %q, %v; want BACKWARD_TRANSITIVE", subject, level, err)
	}

	v1, err := serde.Avro[itUserV1Go](serde.AvroConfig{Registry: reg, Schema: itUserV1, Subject: storeSubject})
	if err != nil {
		t.Fatal(err)
	}
	id1, err := v1.Register(ctx, topic)
	if err != nil {
		t.Fatalf("register v1: %v", err)
	}
	if found, err := reg.Lookup(ctx, subject, itUserV1); err != nil || found.ID != id1 || found.Version != 1 {
		t.Errorf("lookup of v1 = %+v, %v; want id %d version 1", found, err, id1)
	}
	old, err := v1.Serialize(topic, itUserV1Go{Name: "ada", Age: 36})
	if err != nil {
		t.Fatal(err)
	}
	kafka.Produce(t, c, &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("ada"), Value: sarama.ByteEncoder(old)})

	// v2, as a new version of the application: registered, and it reads
	// v1's record from Kafka with the default.
	v2, err := serde.Avro[itUserV2Go](serde.AvroConfig{Registry: reg, Schema: itUserV2, Subject: storeSubject})
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Check(ctx, subject, itUserV2); err != nil {
		t.Errorf("check of the compatible v2: %v", err)
	}
	id2, err := v2.Register(ctx, topic)
	if err != nil {
		t.Fatalf("register the compatible v2: %v", err)
	}
	if id2 == id1 {
		t.Fatalf("v2 got v1's id %d", id1)
	}
	if found, err := reg.Lookup(ctx, subject, itUserV2); err != nil || found.ID != id2 || found.Version != 2 {
		t.Errorf("lookup of v2 = %+v, %v; want id %d version 2", found, err, id2)
	}
	read := kafka.ReadAll(t, c, topic, sarama.ReadCommitted, func(got []*sarama.ConsumerMessage) bool { return len(got) == 1 })
	if !slices.Equal(read[0].Value, old) {
		t.Fatalf("Kafka returned % x, want % x", read[0].Value, old)
	}
	migrated, err := v2.Deserialize(topic, read[0].Value)
	if err != nil {
		t.Fatalf("v2 reading v1 (id %d): %v", id1, err)
	}
	if want := (itUserV2Go{Name: "ada", Age: 36, Country: "unknown"}); migrated != want {
		t.Errorf("v2 read %+v, want %+v", migrated, want)
	}
	rewritten, err := v2.Serialize(topic, migrated)
	if err != nil {
		t.Fatal(err)
	}
	if got := int(rewritten[1])<<24 | int(rewritten[2])<<16 | int(rewritten[3])<<8 | int(rewritten[4]); got != id2 {
		t.Errorf("the rewritten value carries id %d, want v2's %d", got, id2)
	}
	if back, err := v2.Deserialize(topic, rewritten); err != nil || back != migrated {
		t.Errorf("v2 reading v2 = %+v, %v", back, err)
	}

	// v3 changes a field's type: the check and the registration are
	// refused with a reason, and nothing is registered.
	err = reg.Check(ctx, subject, itUserV3)
	var inc *schema.IncompatibleError
	if !errors.As(err, &inc) || inc.Subject != subject || !strings.Contains(inc.Reason, "name") {
		t.Errorf("check of v3: %v, want an IncompatibleError naming the field", err)
	} else {
		t.Logf("check of v3: %v", err)
	}
	v3, err := serde.Avro[map[string]any](serde.AvroConfig{Registry: reg, Schema: itUserV3, Subject: storeSubject})
	if err != nil {
		t.Fatal(err)
	}
	_, err = v3.Register(ctx, topic)
	inc = nil
	if !errors.As(err, &inc) || inc.Subject != subject || !strings.Contains(strings.ToLower(inc.Reason), "incompatible") {
		t.Errorf("register v3: %v, want an IncompatibleError with the registry's reason", err)
	} else {
		t.Logf("register v3: %v", err)
	}
	if _, err := v3.Serialize(topic, map[string]any{"name": 1, "age": int64(2), "country": "x"}); !errors.As(err, &inc) {
		t.Errorf("Serialize under the refused v3: %v, want the IncompatibleError", err)
	}
	// Only BACKWARD_TRANSITIVE refuses this one: dropping the default of
	// country still reads v2's records, which all have it, but no longer
	// v1's, which do not.
	transitiveOnly := strings.Replace(itUserV2, `,"default":"unknown"`, "", 1)
	err = reg.Check(ctx, subject, transitiveOnly)
	inc = nil
	if !errors.As(err, &inc) || !strings.Contains(inc.Reason, string(schema.BackwardTransitive)) {
		t.Errorf("check of a schema that reads only the latest version: %v, want refused under BACKWARD_TRANSITIVE", err)
	} else {
		t.Logf("check of a schema that reads only the latest version: %v", err)
	}
	if _, err := reg.Register(ctx, subject, transitiveOnly); !errors.As(err, &inc) {
		t.Errorf("register a schema that reads only the latest version: %v, want an IncompatibleError", err)
	}
	versions, err := reg.Versions(ctx, subject)
	if err != nil || !slices.Equal(versions, []int{1, 2}) {
		t.Errorf("versions of %s = %v, %v; want [1 2]: a refused schema must not be registered", subject, versions, err)
	}
	// A v3 reader cannot resolve v1 data either: a format error with v1's id.
	var fe *serde.FormatError
	if _, err := v3.Deserialize(topic, old); !errors.As(err, &fe) || fe.SchemaID != id1 {
		t.Errorf("v3 reading v1: %v, want a FormatError with id %d", err, id1)
	}
}

// A record whose schema id the registry does not know is refused with the
// id in the error, as bad data (not as an unreachable registry).
func TestAvroUnknownSchemaID(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	reg := newRegistry(t, c)
	s, err := serde.Avro[itUserV1Go](serde.AvroConfig{Registry: reg, Schema: itUserV1})
	if err != nil {
		t.Fatal(err)
	}
	const id = 0x7ffff3c1 // 2147480513
	frame := []byte{0, 0x7f, 0xff, 0xf3, 0xc1, 0x06, 'a', 'd', 'a', 0x48}
	_, err = s.Deserialize("t", frame)
	var fe *serde.FormatError
	if !errors.As(err, &fe) || fe.SchemaID != id || !errors.Is(err, serde.ErrUnknownSchema) || !errors.Is(err, schema.ErrNotFound) {
		t.Fatalf("got %v, want a FormatError for unknown schema id %d", err, id)
	}
	if !strings.Contains(err.Error(), "2147480513") {
		t.Errorf("the error does not name the id: %v", err)
	}
	t.Logf("unknown id: %v", err)
}

// Avro written by weir is read by another Avro implementation (Python's
// fastavro, with the writer schema it fetches from the registry by the
// frame's id), and what fastavro writes in the Confluent wire format is
// read by weir.
func TestAvroInteroperatesWithFastavro(t *testing.T) {
	c := kafka.Cluster(t)
	t.Parallel()
	python := needFastavro(t)
	ctx := context.Background()
	reg := newRegistry(t, c)
	topic := c.Name(t, "users")
	subject := schema.TopicSubject(topic, schema.Value)
	deleteSubjects(t, c, subject)

	v2, err := serde.Avro[itUserV2Go](serde.AvroConfig{Registry: reg, Schema: itUserV2})
	if err != nil {
		t.Fatal(err)
	}
	frame, err := v2.Serialize(topic, itUserV2Go{Name: "grüße", Age: -70000, Country: "de"})
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(ctx, python, "-c", fastavroScript, c.RegistryURL, hex.EncodeToString(frame)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("fastavro: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("fastavro: %v", err)
	}
	var got struct {
		Read    map[string]any `json:"read"`
		Written string         `json:"written"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("fastavro's output %q: %v", out, err)
	}
	if got.Read["name"] != "grüße" || got.Read["age"] != float64(-70000) || got.Read["country"] != "de" {
		t.Errorf("fastavro read %v from weir's record", got.Read)
	}

	written, err := hex.DecodeString(got.Written)
	if err != nil {
		t.Fatal(err)
	}
	back, err := v2.Deserialize(topic, written)
	if err != nil {
		t.Fatalf("weir reading fastavro's record: %v", err)
	}
	if want := (itUserV2Go{Name: "från python", Age: 1 << 40, Country: "se"}); back != want {
		t.Errorf("weir read %+v from fastavro's record, want %+v", back, want)
	}
	// And a v1 reader resolves fastavro's v2 record, dropping the new field.
	v1, err := serde.Avro[itUserV1Go](serde.AvroConfig{Registry: reg, Schema: itUserV1,
		Subject: func(string) string { return subject + "-v1-reader" }})
	if err != nil {
		t.Fatal(err)
	}
	if old, err := v1.Deserialize(topic, written); err != nil || old != (itUserV1Go{Name: "från python", Age: 1 << 40}) {
		t.Errorf("v1 reading fastavro's v2 record = %+v, %v", old, err)
	}
}

// fastavroScript decodes the Confluent frame in argv[2] with the writer
// schema it fetches from the registry at argv[1], then writes a record of
// its own under the same schema id, and prints both as JSON.
const fastavroScript = `
import io, json, struct, sys, urllib.request
import fastavro
url, frame = sys.argv[1], bytes.fromhex(sys.argv[2])
assert frame[0] == 0, "magic byte"
sid = struct.unpack(">I", frame[1:5])[0]
with urllib.request.urlopen(f"{url}/schemas/ids/{sid}") as r:
    text = json.load(r)["schema"]
schema = fastavro.parse_schema(json.loads(text))
read = fastavro.schemaless_reader(io.BytesIO(frame[5:]), schema)
buf = io.BytesIO()
buf.write(b"\x00" + struct.pack(">I", sid))
fastavro.schemaless_writer(buf, schema, {"name": "från python", "age": 1 << 40, "country": "se"})
print(json.dumps({"read": read, "written": buf.getvalue().hex()}))
`

// needFastavro returns a python3 that imports fastavro, installing it with
// pip when missing. Outside CI a machine without python3 or pip skips the
// test; under CI=true that is a failure.
func needFastavro(t *testing.T) string {
	t.Helper()
	fail := t.Skipf
	if os.Getenv("CI") == "true" {
		fail = t.Fatalf
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		fail("no python3 for the fastavro interoperability test: %v", err)
		return ""
	}
	if exec.Command(python, "-c", "import fastavro").Run() == nil {
		return python
	}
	out, err := exec.Command(python, "-m", "pip", "install", "--quiet", "fastavro==1.13.1").CombinedOutput()
	if err != nil {
		fail("pip install fastavro: %v: %s", err, out)
		return ""
	}
	if out, err := exec.Command(python, "-c", "import fastavro").CombinedOutput(); err != nil {
		fail("fastavro installed but not importable: %v: %s", err, out)
	}
	return python
}
