// Command fiberbench is the Go peer of `neverblock bench fiber-chain|fiber-switch --peers`.
//
// Go has no fibers; the nearest equivalent of a resume/yield or transfer is a
// hand-off between goroutines over unbuffered channels, which is what this does.
// The runtime experiments use goroutines, WaitGroup, channels and time.Sleep.
//
//	fiberbench fiber-chain --t 10000 --warmup 20 --runs 20
//	fiberbench fiber-switch --t 100 --n 1000
//	fiberbench spawn-join --n 100000
//	fiberbench channel-ping-pong --n 1000000
//	fiberbench sleepers --n 1000000 --sleep_ms 2000
//
// Each prints one JSON line: {"bench", "impl": "go", "params", "metrics"}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fiberbench fiber-chain|fiber-switch [flags]")
		os.Exit(2)
	}
	flags := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	t := flags.Int("t", 10000, "fibers")
	n := flags.Int("n", 1000, "rounds (fiber-switch)")
	warmup := flags.Int("warmup", 20, "untimed runs (fiber-chain)")
	runs := flags.Int("runs", 20, "timed runs (fiber-chain)")
	sleepMs := flags.Int("sleep_ms", 2000, "sleep of each goroutine (sleepers)")
	flags.Parse(os.Args[2:])
	switch os.Args[1] {
	case "fiber-chain":
		chain(*t, *warmup, *runs)
	case "fiber-switch":
		fiberSwitch(*t, *n)
	case "spawn-join":
		spawnJoin(*n)
	case "channel-ping-pong":
		pingPong(*n)
	case "sleepers":
		sleepers(*n, *sleepMs)
	default:
		fmt.Fprintln(os.Stderr, "unknown benchmark", os.Args[1])
		os.Exit(2)
	}
}

// link is one goroutine of the chain: it waits for x on its channel, then either
// hands x to the root or starts the next goroutine and hands it x+1. It then
// stays blocked, alive like a suspended fiber, until the run is over.
func link(t int, in chan int, root chan int, done chan struct{}) {
	x := <-in
	if x > t {
		root <- x
	} else {
		next := make(chan int)
		go link(t, next, root, done)
		next <- x + 1
	}
	<-done
}

func chainOnce(t int) time.Duration {
	root, first, done := make(chan int), make(chan int), make(chan struct{})
	start := time.Now()
	go link(t, first, root, done)
	first <- 0
	result := <-root
	elapsed := time.Since(start)
	close(done)
	if result != t+1 {
		panic(fmt.Sprintf("chain returned %d, expected %d", result, t+1))
	}
	return elapsed
}

func chain(t, warmup, runs int) {
	for i := 0; i < warmup; i++ {
		chainOnce(t)
	}
	times := make([]float64, runs)
	mean, min := 0.0, math.Inf(1)
	for i := range times {
		times[i] = chainOnce(t).Seconds()
		mean += times[i] / float64(runs)
		min = math.Min(min, times[i])
	}
	variance := 0.0
	for _, x := range times {
		variance += (x - mean) * (x - mean) / math.Max(float64(runs-1), 1)
	}
	emit("fiber-chain", map[string]int{"t": t, "warmup": warmup, "runs": runs},
		map[string]float64{"mean_s": mean, "stddev_s": math.Sqrt(variance), "min_s": min})
}

// fiberSwitch: t goroutines each answer a request with the index of a random
// goroutine; the driver sends to goroutine `next` and waits for its answer.
func fiberSwitch(t, n int) {
	requests := make([]chan struct{}, t)
	replies := make(chan int)
	for i := range requests {
		requests[i] = make(chan struct{})
		go func(in chan struct{}, seed uint64) {
			rng := rand.New(rand.NewPCG(seed, seed))
			for range in {
				replies <- rng.IntN(t)
			}
		}(requests[i], uint64(i))
	}
	drive := func() {
		next := 0
		for i := 0; i < n*t; i++ {
			requests[next] <- struct{}{}
			next = <-replies
		}
	}
	drive()
	start := time.Now()
	drive()
	total := time.Since(start).Seconds()
	for _, in := range requests {
		close(in)
	}
	emit("fiber-switch", map[string]int{"t": t, "n": n},
		map[string]float64{"total_s": total, "round_trip_ns": total * 1e9 / float64(n*t)})
}

// spawnJoin: start n goroutines and wait for all with a WaitGroup; best of 5.
func spawnJoin(n int) {
	once := func() time.Duration {
		var wg sync.WaitGroup
		results := make([]int, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func(i int) {
				results[i] = i
				wg.Done()
			}(i)
		}
		wg.Wait()
		return time.Since(start)
	}
	once()
	best := once()
	for i := 0; i < 4; i++ {
		best = min(best, once())
	}
	emit("spawn-join", map[string]int{"n": n},
		map[string]float64{"total_s": best.Seconds(), "per_fiber_ns": float64(best.Nanoseconds()) / float64(n)})
}

// pingPongRuns is how many timed runs pingPong takes the fastest of, as neverblock does.
const pingPongRuns = 3

// pingPong: two goroutines bounce a counter over unbuffered channels.
func pingPong(n int) {
	once := func(rounds int) time.Duration {
		ping, pong := make(chan int), make(chan int)
		go func() {
			for v := range ping {
				pong <- v + 1
			}
		}()
		start := time.Now()
		v := 0
		for i := 0; i < rounds; i++ {
			ping <- v
			v = <-pong
		}
		elapsed := time.Since(start)
		close(ping)
		return elapsed
	}
	once(n / 10)
	best := once(n)
	for i := 1; i < pingPongRuns; i++ {
		best = min(best, once(n))
	}
	emit("channel-ping-pong", map[string]int{"n": n},
		map[string]float64{"total_s": best.Seconds(), "round_trip_ns": float64(best.Nanoseconds()) / float64(n)})
}

// rss reads this process's resident memory from /proc, as neverblock does.
func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kib, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kib * 1024
		}
	}
	return 0
}

// sleepers: n goroutines sleep until one deadline; memory each while asleep, and
// the time from the deadline until every one has woken.
func sleepers(n, sleepMs int) {
	before := rss()
	deadline := time.Now().Add(time.Duration(sleepMs) * time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			time.Sleep(time.Until(deadline))
			wg.Done()
		}()
	}
	runtime.Gosched()
	time.Sleep(time.Until(deadline) / 2)
	asleep := rss() - before
	wg.Wait()
	wake := time.Since(deadline)
	emit("sleepers", map[string]int{"n": n},
		map[string]float64{"bytes_per_sleeper_bytes": float64(asleep / int64(n)), "wake_all_s": wake.Seconds()})
}

func emit(bench string, params map[string]int, metrics map[string]float64) {
	row := map[string]any{"bench": bench, "impl": "go", "params": params, "metrics": metrics}
	line, err := json.Marshal(row)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(line))
}
