package queue

// SealJob is q.sealJob, for the tests: a job as a queue of another
// version may have sealed it.
func SealJob(q *Queue, j Job) (string, error) { return q.sealJob(j) }
