// Go peer of `neverblock bench pg-select1` and `pg-mix`: the same workloads
// through pgx's pgxpool, goroutines for fibers. Prints one JSON row per run,
// in the benchmarks' row format.
//
//	pgxbench select1 --url URL --connections 16 --fibers 256 --seconds 3
//	pgxbench mix --url URL --connections 16 --concurrency C --per-client 20 --k K --long-ms 50
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: pgxbench select1|mix [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	flags := flag.NewFlagSet(mode, flag.ExitOnError)
	url := flags.String("url", "", "postgres URL")
	connections := flags.Int("connections", 16, "pool size")
	fibers := flags.Int("fibers", 256, "goroutines (select1)")
	seconds := flags.Float64("seconds", 3, "measured seconds (select1)")
	concurrency := flags.Int("concurrency", 100, "goroutines (mix)")
	perClient := flags.Int("per-client", 20, "queries per goroutine (mix)")
	k := flags.Int("k", 5, "one long query every k (mix)")
	longMs := flags.Float64("long-ms", 50, "the long query's pg_sleep (mix)")
	flags.Parse(os.Args[2:])

	ctx := context.Background()
	config, err := pgxpool.ParseConfig(*url)
	check(err)
	config.MaxConns = int32(*connections)
	config.MinConns = int32(*connections)
	pool, err := pgxpool.NewWithConfig(ctx, config)
	check(err)
	defer pool.Close()
	// Open every connection before timing, as the other implementations do.
	for pool.Stat().TotalConns() < int32(*connections) {
		time.Sleep(10 * time.Millisecond)
	}

	var row map[string]any
	switch mode {
	case "select1":
		row = select1(ctx, pool, *connections, *fibers, *seconds)
	case "mix":
		row = mix(ctx, pool, *concurrency, *perClient, *k, *longMs)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", mode)
		os.Exit(2)
	}
	out, err := json.Marshal(row)
	check(err)
	fmt.Println(string(out))
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// select1: goroutines run the prepared `select 1` for `seconds` after a 0.5 s warm-up.
func select1(ctx context.Context, pool *pgxpool.Pool, connections, fibers int, seconds float64) map[string]any {
	var counting, stop atomic.Bool
	var done atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < fibers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int32
			for !stop.Load() {
				check(pool.QueryRow(ctx, "select 1").Scan(&n))
				if counting.Load() {
					done.Add(1)
				}
			}
		}()
	}
	time.Sleep(500 * time.Millisecond)
	counting.Store(true)
	start := time.Now()
	time.Sleep(time.Duration(seconds * float64(time.Second)))
	count := done.Load()
	elapsed := time.Since(start).Seconds()
	stop.Store(true)
	wg.Wait()
	return map[string]any{
		"bench":   "pg-select1",
		"impl":    "go-pgxpool",
		"params":  map[string]any{"connections": connections, "fibers": fibers},
		"metrics": map[string]any{"queries_per_s": math.Round(float64(count) / elapsed), "threads": runtime.GOMAXPROCS(0)},
	}
}

// mix: every k-th query overall is pg_sleep(long-ms), the rest `select 1`: wall seconds.
func mix(ctx context.Context, pool *pgxpool.Pool, concurrency, perClient, k int, longMs float64) map[string]any {
	long := fmt.Sprintf("select pg_sleep(%g)", longMs/1000)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < concurrency; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < perClient; j++ {
				sql := "select 1"
				if (i*perClient+j)%k == 0 {
					sql = long
				}
				rows, err := pool.Query(ctx, sql)
				check(err)
				rows.Close()
				check(rows.Err())
			}
		}(i)
	}
	wg.Wait()
	return map[string]any{
		"bench":   "pg-mix",
		"impl":    "go-pgxpool",
		"params":  map[string]any{"k": k, "concurrency": concurrency},
		"metrics": map[string]any{"seconds": math.Round(time.Since(start).Seconds()*1000) / 1000, "threads": runtime.GOMAXPROCS(0)},
	}
}
