package awsfake

import (
	"net/http"
	"sort"
	"time"

	"github.com/aws/smithy-go/encoding/cbor"
)

// metricPoint is one data point SetMetric recorded.
type metricPoint struct {
	namespace, name string
	dims            map[string]string
	at              time.Time
	value           float64
}

// SetMetric records a data point of a CloudWatch metric: GetMetricData
// sums the points of a query's metric (its namespace, name and exact
// dimensions) per period.
func (s *Server) SetMetric(namespace, name string, dims map[string]string, at time.Time, value float64) {
	s.mu.Lock()
	s.metrics = append(s.metrics, metricPoint{namespace, name, dims, at, value})
	s.mu.Unlock()
}

// cloudWatch answers GetMetricData in the RPC v2 CBOR protocol the SDK's
// CloudWatch client speaks (MetricStat queries; Sum of each period).
func (s *Server) cloudWatch(w http.ResponseWriter, op string, body []byte) {
	if op != "GetMetricData" {
		cborError(w, "UnknownOperation", "awsfake: cloudwatch "+op)
		return
	}
	s.call("cloudwatch:GetMetricData")
	v, err := cbor.Decode(body)
	in, ok := v.(cbor.Map)
	if err != nil || !ok {
		cborError(w, "ValidationError", "malformed CBOR")
		return
	}
	start, err1 := cbor.AsTime(in["StartTime"])
	end, err2 := cbor.AsTime(in["EndTime"])
	queries, _ := in["MetricDataQueries"].(cbor.List)
	if err1 != nil || err2 != nil || len(queries) == 0 || len(queries) > 500 {
		cborError(w, "ValidationError", "StartTime, EndTime and 1 to 500 MetricDataQueries")
		return
	}
	s.mu.Lock()
	points := append([]metricPoint(nil), s.metrics...)
	s.mu.Unlock()
	var results cbor.List
	for _, qv := range queries {
		q, _ := qv.(cbor.Map)
		id, _ := q["Id"].(cbor.String)
		ms, _ := q["MetricStat"].(cbor.Map)
		m, _ := ms["Metric"].(cbor.Map)
		period, _ := cbor.AsInt64(ms["Period"])
		if period <= 0 {
			cborError(w, "ValidationError", "MetricStat.Period")
			return
		}
		ns, _ := m["Namespace"].(cbor.String)
		name, _ := m["MetricName"].(cbor.String)
		dims := metricDims(m)
		sums := map[int64]float64{}
		for _, p := range points {
			if p.namespace != string(ns) || p.name != string(name) || !sameDims(p.dims, dims) || p.at.Before(start) || !p.at.Before(end) {
				continue
			}
			b := start.Unix() + (p.at.Unix()-start.Unix())/period*period
			sums[b] += p.value
		}
		ts, vals := timeSeries(sums)
		results = append(results, cbor.Map{"Id": id, "Label": id, "StatusCode": cbor.String("Complete"), "Timestamps": ts, "Values": vals})
	}
	w.Header().Set("Content-Type", "application/cbor")
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	_, _ = w.Write(cbor.Encode(cbor.Map{"MetricDataResults": results}))
}

// metricDims are a query's metric's dimensions, by name.
func metricDims(m cbor.Map) map[string]string {
	dims := map[string]string{}
	if dl, ok := m["Dimensions"].(cbor.List); ok {
		for _, dv := range dl {
			d, _ := dv.(cbor.Map)
			k, _ := d["Name"].(cbor.String)
			val, _ := d["Value"].(cbor.String)
			dims[string(k)] = string(val)
		}
	}
	return dims
}

// timeSeries is a query's result: the periods' starts (epoch-seconds
// tags) and their sums, latest first.
func timeSeries(sums map[int64]float64) (ts, vals cbor.List) {
	keys := make([]int64, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] > keys[j] }) // TimestampDescending, the default
	ts, vals = cbor.List{}, cbor.List{}
	for _, k := range keys {
		ts = append(ts, &cbor.Tag{ID: 1, Value: cbor.Float64(k)})
		vals = append(vals, cbor.Float64(sums[k]))
	}
	return ts, vals
}

func sameDims(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func cborError(w http.ResponseWriter, code, msg string) {
	w.Header().Set("Content-Type", "application/cbor")
	w.Header().Set("Smithy-Protocol", "rpc-v2-cbor")
	w.WriteHeader(400)
	_, _ = w.Write(cbor.Encode(cbor.Map{"__type": cbor.String(code), "message": cbor.String(msg)}))
}
