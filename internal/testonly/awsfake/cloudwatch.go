package awsfake

import (
	"encoding/json"
	"net/http"
	"sort"
	"time"
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

// cloudWatch answers GetMetricData in the JSON 1.0 protocol (MetricStat
// queries; Sum of each period), one of the protocols CloudWatch speaks
// (the SDK's generated client speaks another, RPC v2 CBOR).
func (s *Server) cloudWatch(w http.ResponseWriter, op string, body []byte) {
	if op != "GetMetricData" {
		jsonError(w, 400, "UnknownOperation", "awsfake: cloudwatch "+op)
		return
	}
	s.call("cloudwatch:GetMetricData")
	var in struct {
		MetricDataQueries []struct {
			ID         string `json:"Id"`
			MetricStat struct {
				Metric struct {
					Namespace, MetricName string
					Dimensions            []struct{ Name, Value string }
				}
				Period int64
				Stat   string
			}
		}
		StartTime, EndTime *float64
	}
	if err := json.Unmarshal(body, &in); err != nil || in.StartTime == nil || in.EndTime == nil || len(in.MetricDataQueries) == 0 || len(in.MetricDataQueries) > 500 {
		jsonError(w, 400, "ValidationError", "StartTime, EndTime (epoch seconds) and 1 to 500 MetricDataQueries")
		return
	}
	start, end := time.Unix(int64(*in.StartTime), 0), time.Unix(int64(*in.EndTime), 0)
	s.mu.Lock()
	points := append([]metricPoint(nil), s.metrics...)
	s.mu.Unlock()
	results := []map[string]any{}
	for _, q := range in.MetricDataQueries {
		period, m := q.MetricStat.Period, q.MetricStat.Metric
		if period <= 0 || q.ID == "" || q.MetricStat.Stat != "Sum" {
			jsonError(w, 400, "ValidationError", "each query needs an Id, MetricStat.Period and the Sum stat")
			return
		}
		dims := map[string]string{}
		for _, d := range m.Dimensions {
			dims[d.Name] = d.Value
		}
		sums := map[int64]float64{}
		for _, p := range points {
			if p.namespace != m.Namespace || p.name != m.MetricName || !sameDims(p.dims, dims) || p.at.Before(start) || !p.at.Before(end) {
				continue
			}
			b := start.Unix() + (p.at.Unix()-start.Unix())/period*period
			sums[b] += p.value
		}
		ts, vals := timeSeries(sums)
		results = append(results, map[string]any{"Id": q.ID, "Label": q.ID, "StatusCode": "Complete", "Timestamps": ts, "Values": vals})
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	_ = json.NewEncoder(w).Encode(map[string]any{"MetricDataResults": results, "Messages": []any{}})
}

// timeSeries is a query's result: the periods' starts (epoch seconds)
// and their sums, latest first.
func timeSeries(sums map[int64]float64) (ts, vals []float64) {
	keys := make([]int64, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] > keys[j] }) // TimestampDescending, the default
	ts, vals = []float64{}, []float64{}
	for _, k := range keys {
		ts = append(ts, float64(k))
		vals = append(vals, sums[k])
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
